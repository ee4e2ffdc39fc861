package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fabric-host/fabric/host"
)

// policyFile is the part of fabric.toml that says what plugins may do and
// whose plugins the host trusts:
//
//	trusted_keys = ["bin/plugin-signing.pub"]  # PEM ed25519 public keys
//	require_signed = true                       # refuse files they did not sign
//
//	[grant]                                     # every plugin (default: nothing)
//	max_pages = 1024                            # memory ceiling, 64 KiB pages
//	timeout_ms = 5000                           # call timeout ceiling
//	max_output_bytes = 65536
//	host_calls_per_sweep = 100000               # budgets; absent: not limited
//	host_calls_per_second = 50000
//	commands_per_sweep = 100000
//	commands_per_second = 50000
//
//	[plugins.my_scanner.grant]                  # one plugin, by manifest name
//	fcall = ["ff_promote_delayed"]
//	read = ["ff:exec:*:core", "ff:idx:*:lane:*:delayed"]
//	write = []
//	sql = []
//	cross_partition = false
//	max_pages = 256
//	sha256 = ["<hex>"]                          # only for these files,
//	signers = ["<key id>"]                      # or ones these keys signed ("*": any trusted)
//
// A [plugins.NAME.grant] table replaces the built-in grant of that name
// (host/grants_stock.toml, bound to a trusted signature: it goes only to
// a file signed by a trusted key); [grant]'s capabilities are added to
// every plugin's and its resources fill the ones a plugin's grant leaves
// out.
type policyFile struct {
	TrustedKeys   []string    `toml:"trusted_keys"`
	RequireSigned *bool       `toml:"require_signed"`
	Grant         *host.Grant `toml:"grant"`
	Plugins       map[string]struct {
		Grant *host.Grant `toml:"grant"`
	} `toml:"plugins"`
}

// trustFlags are the flags of the operator's policy and trusted keys,
// shared by `fabric run` and the plugins commands.
type trustFlags struct {
	trustedKeys   *string
	requireSigned *bool
	// file is the config file's policy part, once read.
	file *policyFile
}

func addTrustFlags(fs *flag.FlagSet) *trustFlags {
	return &trustFlags{
		trustedKeys:   fs.String("trusted-keys", "", "comma-separated PEM ed25519 public key files whose plugin signatures (NAME.wasm.sig) the host trusts (default: plugin-signing.pub beside the plugin directory, when it exists: the key `make plugins` signs the stock set with)"),
		requireSigned: fs.Bool("require-signed", false, "refuse every plugin file not signed by a --trusted-keys key"),
	}
}

// readFile reads path's policy part; trusted_keys and require_signed set
// their flags unless given on the command line. Unknown keys are left to
// the config file's own decoding.
func (t *trustFlags) readFile(fs *flag.FlagSet, path string) error {
	var f policyFile
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return fmt.Errorf("%w: --config %s: %v", errUsage, path, err)
	}
	for _, k := range md.Undecoded() {
		// Other keys are the run config's; a grant table's are all known.
		if (len(k) == 2 && k[0] == "grant") || (len(k) == 4 && k[0] == "plugins" && k[2] == "grant") {
			return fmt.Errorf("%w: --config %s: unknown key %s", errUsage, path, k)
		}
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if len(f.TrustedKeys) > 0 && !given["trusted-keys"] {
		keys := make([]string, len(f.TrustedKeys))
		for i, k := range f.TrustedKeys {
			if !filepath.IsAbs(k) {
				k = filepath.Join(filepath.Dir(path), k)
			}
			keys[i] = k
		}
		*t.trustedKeys = strings.Join(keys, ",")
	}
	if f.RequireSigned != nil && !given["require-signed"] {
		*t.requireSigned = *f.RequireSigned
	}
	t.file = &f
	return nil
}

// policy returns the host's policy: the built-in one, its grants bound
// to a trusted signature (host.Policy.BindStock), with the config file's
// [grant] and [plugins.NAME.grant] tables laid over it (a table of the
// operator's replaces the stock one, bound only by its own sha256 and
// signers).
func (t *trustFlags) policy() (*host.Policy, error) {
	p := host.StockPolicy().BindStock()
	if t != nil && t.file != nil {
		if t.file.Grant != nil {
			p.Default = *t.file.Grant
		}
		for name, e := range t.file.Plugins {
			if e.Grant != nil {
				p.Plugins[name] = *e.Grant
			}
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: --config: %v", errUsage, strings.TrimPrefix(err.Error(), "host: "))
	}
	return &p, nil
}

// defaultKeyName is the public key `make plugins` signs the stock set
// with, beside the plugin directory (bin/plugin-signing.pub).
const defaultKeyName = "plugin-signing.pub"

// defaultKey is the key trusted when neither --trusted-keys nor
// trusted_keys names one: defaultKeyName beside the plugin directory dir
// (bin/plugin-signing.pub for bin/plugins), when it exists, else "".
func defaultKey(dir string) string {
	if dir == "" {
		return ""
	}
	p := filepath.Join(filepath.Dir(filepath.Clean(dir)), defaultKeyName)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// keys reads the trusted public keys: --trusted-keys (or trusted_keys),
// else the default key beside the plugin directory dir (defaultKey).
// implicit is the default key's path when it was used.
func (t *trustFlags) keys(dir string) (keys []ed25519.PublicKey, require bool, implicit string, err error) {
	if t == nil {
		return nil, false, "", nil
	}
	named := splitList(*t.trustedKeys)
	if len(named) == 0 {
		if implicit = defaultKey(dir); implicit != "" {
			named = []string{implicit}
		}
	}
	keys, err = host.ReadPublicKeys(named...)
	if err != nil {
		return nil, false, "", fmt.Errorf("--trusted-keys: %w", err)
	}
	if *t.requireSigned && len(keys) == 0 {
		return nil, false, "", fmt.Errorf("%w: --require-signed needs --trusted-keys", errUsage)
	}
	return keys, *t.requireSigned, implicit, nil
}

// apply sets cfg's Policy, TrustedKeys and RequireSigned (cfg.PluginDir
// set: the default key is the one beside it). implicit is the default
// key's path when it is the one trusted.
func (t *trustFlags) apply(cfg *host.Config) (implicit string, err error) {
	p, err := t.policy()
	if err != nil {
		return "", err
	}
	keys, req, implicit, err := t.keys(cfg.PluginDir)
	if err != nil {
		return "", err
	}
	cfg.Policy, cfg.TrustedKeys, cfg.RequireSigned = p, keys, req
	return implicit, nil
}

func init() {
	register(&command{
		name:    "plugins keygen",
		summary: "Make an ed25519 plugin signing key: PREFIX.key (private, mode 0600) and PREFIX.pub (for --trusted-keys).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			out := fs.String("out", "plugin-signing", "path prefix of the key files")
			force := fs.Bool("force", false, "overwrite existing key files")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				priv, pub, err := host.GenerateKey(nil)
				if err != nil {
					return err
				}
				flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
				if *force {
					flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
				}
				for _, f := range []struct {
					path string
					b    []byte
					mode os.FileMode
				}{{*out + ".key", priv, 0o600}, {*out + ".pub", pub, 0o644}} {
					fh, err := os.OpenFile(f.path, flags, f.mode)
					if err != nil {
						return fmt.Errorf("keygen: %w", err)
					}
					if _, err := fh.Write(f.b); err != nil {
						fh.Close()
						return fmt.Errorf("keygen: %w", err)
					}
					if err := fh.Close(); err != nil {
						return fmt.Errorf("keygen: %w", err)
					}
				}
				k, _ := host.ParsePublicKey(pub)
				fmt.Fprintf(env.stdout, "key %s: private %s.key, public %s.pub\n", host.KeyID(k), *out, *out)
				return nil
			}
		},
	})
	register(&command{
		name:    "plugins sign",
		usage:   "FILE...",
		summary: "Validate each plugin file and write its detached signature FILE.sig (ed25519 over its sha256 and manifest).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			keyPath := fs.String("key", "plugin-signing.key", "PEM ed25519 private key (plugins keygen)")
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) == 0 {
					return fmt.Errorf("%w: want at least one FILE", errUsage)
				}
				b, err := os.ReadFile(*keyPath)
				if err != nil {
					return fmt.Errorf("--key: %w", err)
				}
				key, err := host.ParsePrivateKey(b)
				if err != nil {
					return fmt.Errorf("--key %s: %w", *keyPath, err)
				}
				for _, path := range args {
					s, err := host.SignPlugin(ctx, path, key, host.InspectConfig{CacheDir: *cache})
					if err != nil {
						return fmt.Errorf("sign %s: %w", path, err)
					}
					fmt.Fprintf(env.stdout, "signed %s (%s %s) sha256 %s by key %s\n", path+host.SignatureSuffix, s.Manifest.Name, s.Manifest.Version, s.SHA256, s.Key)
				}
				return nil
			}
		},
	})
	register(&command{
		name:    "plugins verify",
		usage:   "FILE...",
		summary: "Check each plugin file's signature against --trusted-keys as a host with --require-signed would; exit 1 with the reason if one fails.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			trust := addTrustFlags(fs)
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) == 0 {
					return fmt.Errorf("%w: want at least one FILE", errUsage)
				}
				keys, _, _, err := trust.keys("") // verify names its keys: no default
				if err != nil {
					return err
				}
				if len(keys) == 0 {
					return fmt.Errorf("%w: want --trusted-keys", errUsage)
				}
				for _, path := range args {
					s, err := host.VerifyPlugin(ctx, path, keys, host.InspectConfig{CacheDir: *cache})
					if err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
					fmt.Fprintf(env.stdout, "ok: %s %s %s sha256 %s signed by key %s\n", path, s.Manifest.Name, s.Manifest.Version, s.SHA256, s.Key)
				}
				return nil
			}
		},
	})
}

// inspectConfig is the host.InspectConfig of the plugins commands about
// file: --config's policy (the built-in one without a file) and trusted
// keys (the default key beside file's directory without any).
func inspectConfig(fs *flag.FlagSet, cache, config, file string, trust *trustFlags) (host.InspectConfig, error) {
	if config != "" {
		if err := trust.readFile(fs, config); err != nil {
			return host.InspectConfig{}, err
		}
	}
	p, err := trust.policy()
	if err != nil {
		return host.InspectConfig{}, err
	}
	keys, req, _, err := trust.keys(filepath.Dir(file))
	if err != nil {
		return host.InspectConfig{}, err
	}
	return host.InspectConfig{CacheDir: cache, Policy: p, TrustedKeys: keys, RequireSigned: req}, nil
}

// grantRows are inspect's requested-vs-granted lines: every capability
// and resource, what the manifest requests, what the operator granted.
func grantRows(in *host.Inspection) [][3]string {
	m, g, lim := in.Manifest, in.Granted, in.Limits
	c := m.Capabilities
	budget := func(v int64) string {
		if v < 0 {
			return "not limited"
		}
		return strconv.FormatInt(v, 10)
	}
	return [][3]string{
		{"capabilities.fcall", list(c.FCall), list(g.FCall)},
		{"capabilities.read", list(c.Read), list(g.Read)},
		{"capabilities.write", list(c.Write), list(g.Write)},
		{"capabilities.sql", list(c.SQL), list(g.SQL)},
		{"capabilities.cross_partition", strconv.FormatBool(c.CrossPartition), strconv.FormatBool(g.CrossPartition)},
		{"max_pages", strconv.FormatUint(uint64(m.MaxPages), 10), strconv.FormatUint(uint64(g.MaxPages), 10)},
		{"timeout_ms", strconv.FormatUint(uint64(m.TimeoutMs), 10), strconv.FormatUint(uint64(g.TimeoutMs), 10)},
		{"max_output_bytes", "-", strconv.Itoa(lim.MaxOutputBytes)},
		{"host_calls_per_sweep", "-", budget(lim.HostCallsPerSweep)},
		{"host_calls_per_second", "-", budget(lim.HostCallsPerSecond)},
		{"commands_per_sweep", "-", budget(lim.CommandsPerSweep)},
		{"commands_per_second", "-", budget(lim.CommandsPerSecond)},
	}
}

// grantTOML is the [plugins.NAME.grant] table that grants exactly what
// the plugin requests, for the operator to paste.
func grantTOML(in *host.Inspection) string {
	g := host.GrantOf(in.Manifest)
	var b strings.Builder
	fmt.Fprintf(&b, "[plugins.%s.grant]\n", in.Manifest.Name)
	for _, kv := range []struct {
		k string
		v []string
	}{{"fcall", g.FCall}, {"read", g.Read}, {"write", g.Write}, {"sql", g.SQL}} {
		if len(kv.v) == 0 {
			continue
		}
		q := slices.Clone(kv.v)
		for i := range q {
			q[i] = strconv.Quote(q[i])
		}
		fmt.Fprintf(&b, "%s = [%s]\n", kv.k, strings.Join(q, ", "))
	}
	if g.CrossPartition {
		b.WriteString("cross_partition = true\n")
	}
	fmt.Fprintf(&b, "max_pages = %d\ntimeout_ms = %d\n", g.MaxPages, g.TimeoutMs)
	return b.String()
}
