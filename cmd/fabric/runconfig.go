package main

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// runFile is the TOML config file of `fabric run --config`. Every key is
// optional; a flag given on the command line wins over the file, the file
// over the flag's default. Durations are Go duration strings ("250ms").
//
//	valkey_url = "redis://127.0.0.1:6379"   # "" or absent: a private server
//	valkey_user = "fabric"                  # an ACL user
//	valkey_password_file = "/run/secrets/valkey"   # never the password itself
//	valkey_tls_ca = "/etc/fabric/valkey-ca.pem"    # any valkey_tls_* turns TLS on
//	valkey_tls_cert = "/etc/fabric/client.pem"
//	valkey_tls_key = "/etc/fabric/client.key"
//	valkey_tls_server_name = "valkey.internal"
//	postgres_url = "postgres://fabric@db:5432/fabric?sslmode=verify-full&sslrootcert=/etc/fabric/pg-ca.pem"
//	postgres_password_file = "/run/secrets/postgres"
//	backend_wait = "30s"                    # wait this long for the backend at start
//	plugin_dir = "bin/plugins"
//	cache_dir = "/var/cache/fabric"
//	status_file = "/run/fabric/status.json"
//	admin_addr = "127.0.0.1:9480"           # "" disables the admin server
//	admin_tls_cert = "/etc/fabric/admin.pem"  # HTTPS, with admin_tls_key
//	admin_tls_key = "/etc/fabric/admin.key"
//	admin_token_file = "/etc/fabric/admin.token" # console writes need it
//	admin_hosts = ["fabric.internal"]       # names it is reached by besides localhost
//	log_level = "info"
//	log_format = "json"
//	view = "auto"                           # auto, tty, lines or off
//	refresh = "1s"
//	census_interval = "2s"
//	gc_percent = 50                         # GOGC of the host process
//	partition_leases = true                 # false: scan every partition
//	host_id = "fabric-a"                    # default <hostname>-<pid>-<random>
//	lease_ttl = "10s"
//	idle_release = "1s"                     # negative: keep every plugin warm
//
//	[partitions]                            # fixed for a deployment
//	flow = 256
//	budget = 32
//	quota = 32
//
//	[demo]
//	enabled = true
//	rate = 100
//	lanes = ["demo-a", "demo-b"]
//	workers = 4
//	concurrency = 8
//	duration = "0s"
//	drain_timeout = "30s"
//	mix = "immediate=50,delayed=15,retry=15,suspend=10,dag=10"
//
//	[plugins.delayed_promoter]              # per plugin, by manifest name
//	interval = "250ms"
//	timeout = "2s"
//	batch_size = 100
//	disabled = false
//	sha256 = ""
//	config = { lanes = "demo-a,demo-b" }
//	idle_release = "never"                  # pinned warm; or a duration
//
// and the operator's grants and trusted keys: trusted_keys,
// require_signed, [grant] and [plugins.NAME.grant] (see policyFile).
type runFile struct {
	ValkeyURL      *string  `toml:"valkey_url"`
	ValkeyUser     *string  `toml:"valkey_user"`
	ValkeyPwFile   *string  `toml:"valkey_password_file"`
	ValkeyTLSCA    *string  `toml:"valkey_tls_ca"`
	ValkeyTLSCert  *string  `toml:"valkey_tls_cert"`
	ValkeyTLSKey   *string  `toml:"valkey_tls_key"`
	ValkeyTLSName  *string  `toml:"valkey_tls_server_name"`
	BackendWait    *string  `toml:"backend_wait"`
	PostgresURL    *string  `toml:"postgres_url"`
	PostgresPwFile *string  `toml:"postgres_password_file"`
	PluginDir      *string  `toml:"plugin_dir"`
	CacheDir       *string  `toml:"cache_dir"`
	StatusFile     *string  `toml:"status_file"`
	AdminAddr      *string  `toml:"admin_addr"`
	AdminTLSCert   *string  `toml:"admin_tls_cert"`
	AdminTLSKey    *string  `toml:"admin_tls_key"`
	AdminTokenFile *string  `toml:"admin_token_file"`
	AdminHosts     []string `toml:"admin_hosts"`
	LogLevel       *string  `toml:"log_level"`
	LogFormat      *string  `toml:"log_format"`
	View           *string  `toml:"view"`
	Refresh        *string  `toml:"refresh"`
	CensusInterval *string  `toml:"census_interval"`
	GCPercent      *int     `toml:"gc_percent"`
	Leases         *bool    `toml:"partition_leases"`
	HostID         *string  `toml:"host_id"`
	LeaseTTL       *string  `toml:"lease_ttl"`
	IdleRelease    *string  `toml:"idle_release"`
	Partitions     *struct {
		Flow   uint16 `toml:"flow"`
		Budget uint16 `toml:"budget"`
		Quota  uint16 `toml:"quota"`
	} `toml:"partitions"`
	Demo struct {
		Enabled      *bool    `toml:"enabled"`
		Rate         *float64 `toml:"rate"`
		Lanes        []string `toml:"lanes"`
		Workers      *int     `toml:"workers"`
		Concurrency  *int     `toml:"concurrency"`
		Duration     *string  `toml:"duration"`
		DrainTimeout *string  `toml:"drain_timeout"`
		Mix          *string  `toml:"mix"`
	} `toml:"demo"`
	Plugins map[string]runFilePlugin `toml:"plugins"`
	// The operator's policy and trusted keys (policy.go reads them).
	TrustedKeys   []string    `toml:"trusted_keys"`
	RequireSigned *bool       `toml:"require_signed"`
	Grant         *host.Grant `toml:"grant"`
}

type runFilePlugin struct {
	Interval  string            `toml:"interval"`
	Timeout   string            `toml:"timeout"`
	BatchSize uint32            `toml:"batch_size"`
	Disabled  bool              `toml:"disabled"`
	SHA256    string            `toml:"sha256"`
	Config    map[string]string `toml:"config"`
	// IdleRelease: "never" pins the plugin warm, a duration releases its
	// idle instance after it (host.PluginConfig.IdleRelease).
	IdleRelease string      `toml:"idle_release"`
	Grant       *host.Grant `toml:"grant"` // policy.go
}

// loadRunFile reads path and applies it to fs: each key sets its flag
// unless that flag was given on the command line. It returns the
// per-plugin configuration, which has no flags.
func loadRunFile(fs *flag.FlagSet, path string) (map[string]host.PluginConfig, error) {
	var f runFile
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return nil, fmt.Errorf("%w: --config %s: %v", errUsage, path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%w: --config %s: unknown keys %s", errUsage, path, strings.Join(keys, ", "))
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	set := func(key, name string, v *string) error {
		if v == nil || given[name] {
			return nil
		}
		if err := fs.Set(name, *v); err != nil {
			// flag's duration parser says only "parse error".
			if g, ok := fs.Lookup(name).Value.(flag.Getter); ok {
				if _, isDur := g.Get().(time.Duration); isDur {
					err = errors.New(`not a duration (want e.g. "250ms", "1s", "2m")`)
				}
			}
			return fmt.Errorf("%w: --config %s: %s = %q: %v", errUsage, path, key, *v, err)
		}
		return nil
	}
	str := func(v any) *string {
		switch x := v.(type) {
		case *bool:
			if x != nil {
				s := strconv.FormatBool(*x)
				return &s
			}
		case *float64:
			if x != nil {
				s := strconv.FormatFloat(*x, 'f', -1, 64)
				return &s
			}
		case *int:
			if x != nil {
				s := strconv.Itoa(*x)
				return &s
			}
		}
		return nil
	}
	var lanes, parts, hosts *string
	if len(f.Demo.Lanes) > 0 {
		s := strings.Join(f.Demo.Lanes, ",")
		lanes = &s
	}
	if len(f.AdminHosts) > 0 {
		s := strings.Join(f.AdminHosts, ",")
		hosts = &s
	}
	if p := f.Partitions; p != nil {
		s := fmt.Sprintf("flow=%d,budget=%d,quota=%d", p.Flow, p.Budget, p.Quota)
		parts = &s
	}
	for _, kv := range []struct {
		key, name string
		v         *string
	}{
		{"valkey_url", "valkey-url", f.ValkeyURL}, {"plugin_dir", "plugins", f.PluginDir}, {"cache_dir", "cache-dir", f.CacheDir},
		{"status_file", "status-file", f.StatusFile}, {"admin_addr", "admin-addr", f.AdminAddr}, {"log_level", "log-level", f.LogLevel},
		{"log_format", "log-format", f.LogFormat}, {"view", "view", f.View}, {"refresh", "refresh", f.Refresh},
		{"census_interval", "census-interval", f.CensusInterval}, {"partitions", "partitions", parts},
		{"demo.enabled", "demo", str(f.Demo.Enabled)}, {"demo.rate", "rate", str(f.Demo.Rate)}, {"demo.lanes", "lanes", lanes},
		{"demo.workers", "workers", str(f.Demo.Workers)}, {"demo.concurrency", "concurrency", str(f.Demo.Concurrency)},
		{"demo.duration", "duration", f.Demo.Duration}, {"demo.drain_timeout", "drain-timeout", f.Demo.DrainTimeout},
		{"demo.mix", "mix", f.Demo.Mix}, {"partition_leases", "partition-leases", str(f.Leases)}, {"host_id", "host-id", f.HostID},
		{"lease_ttl", "lease-ttl", f.LeaseTTL}, {"idle_release", "idle-release", f.IdleRelease}, {"gc_percent", "gc-percent", str(f.GCPercent)},
		{"valkey_user", "valkey-user", f.ValkeyUser}, {"valkey_password_file", "valkey-password-file", f.ValkeyPwFile},
		{"valkey_tls_ca", "valkey-tls-ca", f.ValkeyTLSCA}, {"valkey_tls_cert", "valkey-tls-cert", f.ValkeyTLSCert}, {"valkey_tls_key", "valkey-tls-key", f.ValkeyTLSKey}, {"valkey_tls_server_name", "valkey-tls-server-name", f.ValkeyTLSName},
		{"backend_wait", "backend-wait", f.BackendWait},
		{"postgres_url", "postgres-url", f.PostgresURL}, {"postgres_password_file", "postgres-password-file", f.PostgresPwFile},
		{"admin_tls_cert", "admin-tls-cert", f.AdminTLSCert}, {"admin_tls_key", "admin-tls-key", f.AdminTLSKey},
		{"admin_token_file", "admin-token-file", f.AdminTokenFile}, {"admin_hosts", "admin-hosts", hosts},
	} {
		if err := set(kv.key, kv.name, kv.v); err != nil {
			return nil, err
		}
	}
	plugins := map[string]host.PluginConfig{}
	for name, p := range f.Plugins {
		pc := host.PluginConfig{BatchSize: p.BatchSize, Disabled: p.Disabled, SHA256: p.SHA256, Config: p.Config}
		for _, d := range []struct {
			key string
			s   string
			dst *time.Duration
		}{{"interval", p.Interval, &pc.Interval}, {"timeout", p.Timeout, &pc.Timeout}} {
			if d.s == "" {
				continue
			}
			v, err := time.ParseDuration(d.s)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%w: --config %s: plugins.%s.%s: %q is not a duration", errUsage, path, name, d.key, d.s)
			}
			*d.dst = v
		}
		switch p.IdleRelease {
		case "":
		case "never":
			pc.IdleRelease = -1
		default:
			v, err := time.ParseDuration(p.IdleRelease)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("%w: --config %s: plugins.%s.idle_release: %q is neither \"never\" nor a positive duration", errUsage, path, name, p.IdleRelease)
			}
			pc.IdleRelease = v
		}
		plugins[name] = pc
	}
	return plugins, nil
}

// checkPluginSections refuses a config file's [plugins.NAME] section that
// names no plugin the host loaded from dir: a typo there would otherwise
// leave the plugin it meant unconfigured without a word.
// Files the host rejected count by the plugin name their manifest gave.
func checkPluginSections(cfg map[string]host.PluginConfig, loaded []host.PluginStatus, files []host.FileStatus, dir string) error {
	have := map[string]bool{}
	var names []string
	add := func(name string) {
		if name != "" && !have[name] {
			have[name] = true
			names = append(names, name)
		}
	}
	for _, p := range loaded {
		add(p.Name)
	}
	for _, f := range files {
		add(f.Plugin)
	}
	var unknown []string
	for name := range cfg {
		if !have[name] {
			unknown = append(unknown, "[plugins."+name+"]")
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	sort.Strings(names)
	return fmt.Errorf("%w: --config: %s names no plugin in %s (plugins there: %s)",
		errUsage, strings.Join(unknown, ", "), dir, strings.Join(names, ", "))
}

// partitionsFlag parses "flow=256,budget=32,quota=32" (missing counts
// keep FlowFabric's defaults).
type partitionsFlag struct{ model.PartitionConfig }

func (p *partitionsFlag) String() string {
	if p == nil || p.PartitionConfig == (model.PartitionConfig{}) {
		return ""
	}
	return fmt.Sprintf("flow=%d,budget=%d,quota=%d", p.Flow, p.Budget, p.Quota)
}

func (p *partitionsFlag) Set(s string) error {
	c := model.DefaultPartitionConfig()
	for _, f := range splitList(s) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return fmt.Errorf("%q: want family=count", f)
		}
		switch k {
		case "flow":
			c.Flow = uint16(n)
		case "budget":
			c.Budget = uint16(n)
		case "quota":
			c.Quota = uint16(n)
		default:
			return fmt.Errorf("%q: family is flow, budget or quota", f)
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	p.PartitionConfig = c
	return nil
}
