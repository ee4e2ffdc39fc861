package valkey

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is a valkey-go URL: "unix:///path/sock", "redis://host:port/db",
	// "valkey://...", or a Valkey Cluster: "valkey+cluster://host:port,
	// host:port,..." (seed nodes; a redis:// URL naming one cluster node is
	// detected as a cluster too). Required.
	URL string
	// DB selects a logical database (0 by default). Ignored when URL names
	// one. A cluster has only database 0.
	DB int
	// Partitions is the deployment's partition config (default 256/32/32).
	Partitions model.PartitionConfig
	// Logger receives client logs (default slog.Default()).
	Logger *slog.Logger
	// Username and Password authenticate the connections (AUTH, or an
	// ACL user with Username). Set, they win over the URL's userinfo
	// (redis://user:password@host). Neither is ever logged or quoted in
	// an error.
	Username, Password string
	// TLS, when set, encrypts the connections with this config (see
	// TLSOptions.Config); an empty ServerName becomes the URL's host. A
	// rediss:// or valkeys:// URL alone gives TLS verified against the
	// system's roots.
	TLS *tls.Config
	// MaxPayloadBytes caps an execution's payload at create (0:
	// backend.DefaultMaxPayloadBytes, 2 MiB; negative: no limit). A larger
	// one is refused with backend.ErrInvalidInput before anything is
	// written.
	MaxPayloadBytes int
}

// Client is fabric's Valkey client: valkey-go underneath, the flowfabric
// library loaded on demand, and one typed method per ff_* function.
// It is safe for concurrent use.
type Client struct {
	c       vk.Client
	parts   model.PartitionConfig
	log     *slog.Logger
	cluster bool   // c is valkey-go's cluster client
	where   string // the URL, redacted, for messages
	// maxPayload caps a created execution's payload (0: none).
	maxPayload int

	reloadMu sync.Mutex
}

// connBufferBytes sizes each connection's read and write buffers.
// valkey-go's default is 0.5 MiB each, on the Go heap for the connection's
// life: 1 MiB a connection, and every blocking call (the workers' pops,
// key-event subscriptions) holds a connection of its own. fabric's
// commands and replies are small (FCALLs of a batch, index pages), and a
// longer reply or pipeline only takes more reads or writes; valkey-go
// parses any reply with any buffer of 32 bytes or more.
const connBufferBytes = 64 << 10

// Dial connects to the server named by cfg.URL. It does not load the
// library; call EnsureLibrary (or Bootstrap) once at start.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("valkey: ClientConfig.URL is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Partitions == (model.PartitionConfig{}) {
		cfg.Partitions = model.DefaultPartitionConfig()
	}
	if err := cfg.Partitions.Validate(); err != nil {
		return nil, err
	}
	// Messages name the server by its redacted URL, and any error text
	// that quotes the password (a driver's, a parser's) is scrubbed.
	where, secrets := redact.URL(cfg.URL), redact.Secrets(cfg.URL)
	if cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	opt, wantCluster, err := parseURL(cfg.URL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL
		}
		return nil, redact.Error(fmt.Errorf("valkey: parse url %q: %w", where, err), secrets...)
	}
	if opt.SelectDB == 0 {
		opt.SelectDB = cfg.DB
	}
	if wantCluster && opt.SelectDB != 0 {
		return nil, fmt.Errorf("valkey: url %q: a cluster has only database 0 (asked for %d)", where, opt.SelectDB)
	}
	if err := applySecurity(&opt, cfg); err != nil {
		return nil, err
	}
	// Client-side caching needs RESP3 tracking, which fabric does not use.
	opt.DisableCache = true
	opt.ReadBufferEachConn, opt.WriteBufferEachConn = connBufferBytes, connBufferBytes
	opt.ClusterOption.ShardsRefreshInterval = clusterRefreshInterval
	c, err := vk.NewClient(opt)
	if err != nil {
		return nil, redact.Error(explainConnectError(fmt.Errorf("valkey: connect %s: %w", where, err), where, opt.Username, opt.TLSConfig != nil && len(opt.TLSConfig.Certificates) == 0), secrets...)
	}
	cl := &Client{c: c, parts: cfg.Partitions, log: cfg.Logger, cluster: c.Mode() == vk.ClientModeCluster, where: where,
		maxPayload: backend.PayloadLimit(cfg.MaxPayloadBytes)}
	if cl.cluster {
		cl.c = newSlotSafeClient(c)
	}
	cl.c = staleConnClient{Client: cl.c}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, redact.Error(explainConnectError(fmt.Errorf("valkey: ping %s: %w", where, err), where, opt.Username, opt.TLSConfig != nil && len(opt.TLSConfig.Certificates) == 0), secrets...)
	}
	if err := cl.checkClusterMode(ctx, wantCluster, opt); err != nil {
		c.Close()
		return nil, redact.Error(err, secrets...)
	}
	return cl, nil
}

// Raw returns the underlying valkey-go client for reads that have no ff_*
// function (index walks, HGETs).
func (c *Client) Raw() vk.Client { return c.c }

// Partitions returns the partition config the client routes with.
func (c *Client) Partitions() model.PartitionConfig { return c.parts }

// Close closes the connections.
func (c *Client) Close() { c.c.Close() }

// isFunctionMissing reports the server errors that mean "the library is
// not loaded" (after FUNCTION FLUSH or a server restart).
func isFunctionMissing(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "function not found") ||
		strings.Contains(s, "function not loaded") ||
		strings.Contains(s, "no matching function")
}

func (c *Client) fcallCmd(fn string, keys, args []string) vk.Completed {
	return c.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// FCallRaw runs FCALL fn and returns the raw reply, reloading the library
// once and retrying when the server says the function does not exist.
func (c *Client) FCallRaw(ctx context.Context, fn string, keys, args []string) (vk.ValkeyMessage, error) {
	if err := c.sameSlot(keys); err != nil {
		return vk.ValkeyMessage{}, fmt.Errorf("valkey: FCALL %s: %w", fn, err)
	}
	res := c.c.Do(ctx, c.fcallCmd(fn, keys, args))
	if err := res.Error(); isFunctionMissing(err) {
		if lerr := c.reload(ctx, err); lerr != nil {
			return vk.ValkeyMessage{}, lerr
		}
		res = c.c.Do(ctx, c.fcallCmd(fn, keys, args))
	}
	msg, err := res.ToMessage()
	if err != nil {
		return msg, fmt.Errorf("valkey: FCALL %s: %w", fn, err)
	}
	return msg, nil
}

// FCall runs FCALL fn and decodes the library's result convention: a
// *Reply on {1, ...}, a *LuaError on {0, code, ...}.
func (c *Client) FCall(ctx context.Context, fn string, keys, args []string) (*Reply, error) {
	msg, err := c.FCallRaw(ctx, fn, keys, args)
	if err != nil {
		return nil, err
	}
	return parseReply(fn, msg)
}

// Call is one FCALL in a pipelined batch (the layout type of model/fcall).
type Call = fcall.Call

// Result is the outcome of one Call in a batch.
type Result struct {
	Reply *Reply
	Err   error
}

// FCallBatch pipelines calls in one round trip (valkey-go DoMulti) and
// decodes each reply. If any call found the library missing, the library is
// reloaded and only those calls are retried. On a cluster a call whose keys
// span slots fails alone with ErrCrossSlot.
func (c *Client) FCallBatch(ctx context.Context, calls []Call) []Result {
	return fcallBatch(c, ctx, calls, callParts, decodeResult, errResult)
}

func callParts(call Call) (fn string, keys, args []string) {
	return call.Function, call.Keys, call.Args
}

func errResult(err error) Result { return Result{Err: err} }

// fcallBatch is FCallBatch over any call and result type: parts names a
// call's function, KEYS and ARGV, decode turns its reply into R, and fail
// an error (a cross-slot call, a failed library reload). PluginStore runs
// the plugins' abi.Calls through it straight into abi.CallResults.
func fcallBatch[C, R any](c *Client, ctx context.Context, calls []C, parts func(C) (string, []string, []string),
	decode func(fn string, r vk.ValkeyResult) R, fail func(error) R) []R {
	out := make([]R, len(calls))
	if len(calls) == 0 {
		return out
	}
	sent := make([]int, 0, len(calls)) // calls that pass the slot check
	for i, call := range calls {
		fn, keys, _ := parts(call)
		if err := c.sameSlot(keys); err != nil {
			out[i] = fail(fmt.Errorf("valkey: FCALL %s: %w", fn, err))
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out
	}
	cmds := make(vk.Commands, len(sent))
	for j, i := range sent {
		cmds[j] = c.fcallCmd(parts(calls[i]))
	}
	var retry []int
	var missing error
	for j, r := range c.c.DoMulti(ctx, cmds...) {
		i := sent[j]
		if err := r.Error(); isFunctionMissing(err) {
			retry, missing = append(retry, i), err
			continue
		}
		fn, _, _ := parts(calls[i])
		out[i] = decode(fn, r)
	}
	if len(retry) > 0 {
		if err := c.reload(ctx, missing); err != nil {
			for _, i := range retry {
				out[i] = fail(err)
			}
			return out
		}
		again := make(vk.Commands, len(retry))
		for j, i := range retry {
			again[j] = c.fcallCmd(parts(calls[i]))
		}
		for j, r := range c.c.DoMulti(ctx, again...) {
			fn, _, _ := parts(calls[retry[j]])
			out[retry[j]] = decode(fn, r)
		}
	}
	return out
}

func decodeResult(fn string, r vk.ValkeyResult) Result {
	msg, err := r.ToMessage()
	if err != nil {
		return Result{Err: fmt.Errorf("valkey: FCALL %s: %w", fn, err)}
	}
	rep, err := parseReply(fn, msg)
	return Result{Reply: rep, Err: err}
}

// reload loads the library after a call found it missing. Concurrent
// callers that hit the same condition share one load.
func (c *Client) reload(ctx context.Context, cause error) error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	c.log.Warn("flowfabric library missing on server; reloading", "error", cause)
	if _, err := c.EnsureLibrary(ctx); err != nil {
		return fmt.Errorf("valkey: reload library after %q: %w", cause, err)
	}
	return nil
}

// ServerTime returns the server's clock in milliseconds (TIME).
func (c *Client) ServerTime(ctx context.Context) (int64, error) {
	us, err := c.ServerTimeMicros(ctx)
	return us / 1000, err
}

// ServerTimeMicros returns the server's clock in microseconds (TIME), for
// a clock kept from it that should not lose the sub-millisecond part.
func (c *Client) ServerTimeMicros(ctx context.Context) (int64, error) {
	us, err := serverTimeOn(ctx, c.c)
	if err == nil || !c.cluster {
		return us, err
	}
	// A keyless command goes to any node the cluster client knows, which
	// after a failover may be the dead primary: ask a reachable one.
	nodes, perr := c.Primaries(ctx)
	if perr != nil {
		return 0, err
	}
	for _, n := range nodes {
		if us, nerr := serverTimeOn(ctx, n.Client); nerr == nil {
			return us, nil
		}
	}
	return 0, err
}

// serverTimeOn reads node's TIME in microseconds.
func serverTimeOn(ctx context.Context, node vk.Client) (int64, error) {
	arr, err := node.Do(ctx, node.B().Time().Build()).AsIntSlice()
	if err != nil || len(arr) != 2 {
		return 0, fmt.Errorf("valkey: TIME: %w", err)
	}
	return arr[0]*1_000_000 + arr[1], nil
}

// libraryVersion is what EnsureLibrary expects ff_version to return.
var libraryVersion = lua.Version
