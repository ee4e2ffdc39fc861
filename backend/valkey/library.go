package valkey

import (
	"context"
	"fmt"
	"strings"

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
// fails or returns another version. The probe after loading must return the
// embedded version; otherwise another process loaded a different version
// concurrently and an error says so.
func (c *Client) EnsureLibrary(ctx context.Context) (LibraryAction, error) {
	if err := c.EnsureFabricLibrary(ctx); err != nil {
		return "", err
	}
	got, err := c.probeVersion(ctx)
	action := LibraryLoaded
	switch {
	case err == nil && got == libraryVersion:
		return LibraryUpToDate, nil
	case err == nil:
		action = LibraryReplaced
	}
	load := c.c.B().FunctionLoad().Replace().FunctionCode(lua.Source()).Build()
	if err := c.c.Do(ctx, load).Error(); err != nil {
		return "", fmt.Errorf("valkey: FUNCTION LOAD flowfabric: %w", err)
	}
	got, err = c.probeVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("valkey: probe ff_version after load: %w", err)
	}
	if got != libraryVersion {
		return "", fmt.Errorf("valkey: library version mismatch after load: expected %s, got %s", libraryVersion, got)
	}
	c.log.Info("flowfabric library loaded", "version", got, "action", string(action))
	return action, nil
}

func (c *Client) probeVersion(ctx context.Context) (string, error) {
	cmd := c.c.B().Fcall().Function("ff_version").Numkeys(0).Build()
	return c.c.Do(ctx, cmd).ToString()
}

// LibraryVersion returns what ff_version answers on the server.
func (c *Client) LibraryVersion(ctx context.Context) (string, error) {
	v, err := c.probeVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("valkey: FCALL ff_version: %w", err)
	}
	return v, nil
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
