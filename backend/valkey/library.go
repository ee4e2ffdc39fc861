package valkey

import (
	"context"
	"fmt"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
)

// LibraryAction says what EnsureLibrary did.
type LibraryAction string

// Library actions.
const (
	LibraryUpToDate LibraryAction = "up_to_date"
	LibraryLoaded   LibraryAction = "loaded"
	LibraryReplaced LibraryAction = "replaced"
)

// EnsureLibrary makes sure the server runs the embedded flowfabric library:
// it probes ff_version, and loads (or replaces) the library when the probe
// fails or returns another version, or when the server runs an older build
// of fabric's own body of the same version (staleFabricBody). The probe after loading must return the
// embedded version; otherwise another process loaded a different version
// concurrently and an error says so. On a cluster it does this on every
// primary (a library lives on each shard; replicas get it from theirs) and
// reports the strongest action taken on any of them.
func (c *Client) EnsureLibrary(ctx context.Context) (LibraryAction, error) {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return "", err
	}
	overall := LibraryUpToDate
	for _, n := range nodes {
		act, err := c.ensureLibraryOn(ctx, n)
		if err != nil {
			return "", c.onNode(n, err)
		}
		if actionRank[act] > actionRank[overall] {
			overall = act
		}
	}
	return overall, nil
}

var actionRank = map[LibraryAction]int{LibraryUpToDate: 0, LibraryLoaded: 1, LibraryReplaced: 2}

// onNode names the node in err on a cluster.
func (c *Client) onNode(n Node, err error) error {
	if !c.cluster {
		return err
	}
	return fmt.Errorf("node %s: %w", n.Addr, err)
}

func (c *Client) ensureLibraryOn(ctx context.Context, n Node) (LibraryAction, error) {
	if err := ensureFabricLibraryOn(ctx, n.Client); err != nil {
		return "", err
	}
	got, err := probeVersion(ctx, n.Client)
	action := LibraryLoaded
	switch {
	case err == nil && got == libraryVersion:
		stale, err := staleFabricBody(ctx, n.Client)
		if err != nil {
			return "", err
		}
		if !stale {
			return LibraryUpToDate, nil
		}
		action = LibraryReplaced
	case err == nil:
		action = LibraryReplaced
	}
	load := n.Client.B().FunctionLoad().Replace().FunctionCode(lua.Source()).Build()
	if err := n.Client.Do(ctx, load).Error(); err != nil {
		return "", fmt.Errorf("valkey: FUNCTION LOAD flowfabric: %w", err)
	}
	got, err = probeVersion(ctx, n.Client)
	if err != nil {
		return "", fmt.Errorf("valkey: probe ff_version after load: %w", err)
	}
	if got != libraryVersion {
		return "", fmt.Errorf("valkey: library version mismatch after load: expected %s, got %s", libraryVersion, got)
	}
	c.log.Info("flowfabric library loaded", "version", got, "action", string(action), "node", n.Addr)
	return action, nil
}

// staleFabricBody reports whether node's flowfabric library is an older
// build of fabric's own (its code carries lua.BuildMarker and differs from
// lua.Source()). ff_version is FlowFabric's and stays the same across
// fabric's changes to function bodies, so the version alone would leave a
// server on the body it first loaded. A library without the marker
// (FlowFabric's own) is never replaced for its code.
func staleFabricBody(ctx context.Context, node vk.Client) (bool, error) {
	cmd := node.B().FunctionList().Libraryname(lua.LibraryName).Withcode().Build()
	libs, err := node.Do(ctx, cmd).ToArray()
	if err != nil {
		return false, fmt.Errorf("valkey: FUNCTION LIST %s: %w", lua.LibraryName, err)
	}
	for _, l := range libs {
		m, err := l.AsMap()
		if err != nil {
			return false, fmt.Errorf("valkey: FUNCTION LIST %s: %w", lua.LibraryName, err)
		}
		name, code := m["library_name"], m["library_code"]
		if n, _ := name.ToString(); n != lua.LibraryName {
			continue
		}
		src, err := code.ToString()
		if err != nil {
			return false, fmt.Errorf("valkey: FUNCTION LIST %s: library_code: %w", lua.LibraryName, err)
		}
		return src != lua.Source() && strings.Contains(src, "\n"+lua.BuildMarker+"\n"), nil
	}
	return false, nil
}

func probeVersion(ctx context.Context, node vk.Client) (string, error) {
	cmd := node.B().Fcall().Function("ff_version").Numkeys(0).Build()
	return node.Do(ctx, cmd).ToString()
}

// LibraryVersion returns what ff_version answers on the server; on a
// cluster every primary must answer the same.
func (c *Client) LibraryVersion(ctx context.Context) (string, error) {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return "", err
	}
	var first string
	for i, n := range nodes {
		v, err := probeVersion(ctx, n.Client)
		if err != nil {
			return "", c.onNode(n, fmt.Errorf("valkey: FCALL ff_version: %w", err))
		}
		if i == 0 {
			first = v
		} else if v != first {
			return "", fmt.Errorf("valkey: primaries run different library versions: %s has %s, %s has %s", nodes[0].Addr, first, n.Addr, v)
		}
	}
	return first, nil
}

// BootstrapConfig is the deployment init a host runs at start.
type BootstrapConfig struct {
	// Lanes are seeded into ff:idx:lanes (default ["default"]).
	Lanes []string
	// WaitpointHMACSecret is the hex secret installed as kid k1 in every
	// flow partition's waitpoint keystore where none is installed yet
	// (FlowFabric's FF_WAITPOINT_HMAC_SECRET). Empty skips the step; signal
	// delivery then fails with hmac_secret_not_initialized.
	WaitpointHMACSecret string
}

// Bootstrap runs the deployment init FlowFabric's server runs, in its
// order: validate-or-create ff:config:partitions, install the waitpoint
// HMAC secret, load the library, seed the lanes index.
func (c *Client) Bootstrap(ctx context.Context, cfg BootstrapConfig) error {
	if err := c.EnsurePartitionConfig(ctx); err != nil {
		return err
	}
	if cfg.WaitpointHMACSecret != "" {
		if err := c.InstallWaitpointHMACSecret(ctx, cfg.WaitpointHMACSecret); err != nil {
			return err
		}
	}
	if _, err := c.EnsureLibrary(ctx); err != nil {
		return err
	}
	lanes := cfg.Lanes
	if len(lanes) == 0 {
		lanes = []string{"default"}
	}
	if err := c.c.Do(ctx, c.c.B().Sadd().Key(model.KeyLanesIndex).Member(lanes...).Build()).Error(); err != nil {
		return fmt.Errorf("valkey: seed lanes: %w", err)
	}
	return nil
}

// EnsurePartitionConfig writes ff:config:partitions on first boot and
// otherwise checks that the stored counts equal the client's; a mismatch
// is an error because routing would silently diverge.
func (c *Client) EnsurePartitionConfig(ctx context.Context) error {
	stored, err := c.c.Do(ctx, c.c.B().Hgetall().Key(model.KeyConfigPartitions).Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("valkey: read %s: %w", model.KeyConfigPartitions, err)
	}
	want := map[string]uint16{
		model.ConfigFieldFlowPartitions:   c.parts.Flow,
		model.ConfigFieldBudgetPartitions: c.parts.Budget,
		model.ConfigFieldQuotaPartitions:  c.parts.Quota,
	}
	if len(stored) == 0 {
		cmd := c.c.B().Hset().Key(model.KeyConfigPartitions).FieldValue().
			FieldValue(model.ConfigFieldFlowPartitions, fmt.Sprint(c.parts.Flow)).
			FieldValue(model.ConfigFieldBudgetPartitions, fmt.Sprint(c.parts.Budget)).
			FieldValue(model.ConfigFieldQuotaPartitions, fmt.Sprint(c.parts.Quota)).Build()
		if err := c.c.Do(ctx, cmd).Error(); err != nil {
			return fmt.Errorf("valkey: write %s: %w", model.KeyConfigPartitions, err)
		}
		return nil
	}
	var bad []string
	for _, f := range []string{model.ConfigFieldFlowPartitions, model.ConfigFieldBudgetPartitions, model.ConfigFieldQuotaPartitions} {
		if stored[f] != fmt.Sprint(want[f]) {
			bad = append(bad, fmt.Sprintf("%s: stored=%s, config=%d", f, stored[f], want[f]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("valkey: partition_mismatch: %s; partition counts are fixed for a deployment", strings.Join(bad, "; "))
	}
	return nil
}

// ReadPartitionConfig reads ff:config:partitions the way workers do: a
// missing or invalid field falls back to its default.
func (c *Client) ReadPartitionConfig(ctx context.Context) (model.PartitionConfig, bool, error) {
	stored, err := c.c.Do(ctx, c.c.B().Hgetall().Key(model.KeyConfigPartitions).Build()).AsStrMap()
	if err != nil {
		return model.PartitionConfig{}, false, fmt.Errorf("valkey: read %s: %w", model.KeyConfigPartitions, err)
	}
	cfg := model.DefaultPartitionConfig()
	if len(stored) == 0 {
		return cfg, false, nil
	}
	parse := func(s string, def uint16) uint16 {
		var n uint64
		if _, err := fmt.Sscan(s, &n); err != nil || n == 0 || n > 65535 {
			return def
		}
		return uint16(n)
	}
	cfg.Flow = parse(stored[model.ConfigFieldFlowPartitions], cfg.Flow)
	cfg.Budget = parse(stored[model.ConfigFieldBudgetPartitions], cfg.Budget)
	cfg.Quota = parse(stored[model.ConfigFieldQuotaPartitions], cfg.Quota)
	return cfg, true, nil
}
