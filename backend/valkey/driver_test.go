package valkey_test

import (
	"context"
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/backendtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestDriverConformance runs the backend.Driver conformance suite on the
// Valkey driver against a real server.
func TestDriverConformance(t *testing.T) {
	t.Parallel()
	var c *valkey.Client
	backendtest.RunWith(t, func(t *testing.T) backend.Driver {
		c = valkeytest.Client(t)
		// Suspension needs the deployment's waitpoint secret (Postgres
		// seeds its own keystore).
		if err := c.InstallWaitpointHMACSecret(context.Background(), "00112233445566778899aabbccddeeff"); err != nil {
			t.Fatal(err)
		}
		return valkey.NewDriver(c)
	}, backendtest.Options{
		// The attempt_timeout scanner's step for one execution: due in
		// the partition's attempt_timeout index by now, it is expired
		// (ff_expire_execution, reason attempt_timeout).
		SweepAttemptTimeouts: func(ctx context.Context, _ backend.Driver, id model.ExecutionID, now int64) error {
			raw := c.Raw()
			score, err := raw.Do(ctx, raw.B().Zscore().Key(model.KeysOn(id.Partition()).AttemptTimeout()).Member(string(id)).Build()).AsFloat64()
			if vk.IsValkeyNil(err) || (err == nil && int64(score) > now) {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = c.ExpireExecution(ctx, &valkey.ExpireExecutionParams{ExecutionID: id, Reason: valkey.ExpireAttemptTimeout})
			return err
		},
		// The delayed promoter's step for one execution.
		PromoteDelayed: func(ctx context.Context, _ backend.Driver, id model.ExecutionID, now int64) error {
			raw := c.Raw()
			lane, err := raw.Do(ctx, raw.B().Hget().Key(model.KeysFor(id).Core()).Field("lane_id").Build()).ToString()
			if err != nil {
				return err
			}
			_, err = c.PromoteDelayed(ctx, &valkey.PromoteDelayedParams{ExecutionID: id, Lane: lane, NowMs: now})
			return err
		},
	})
}
