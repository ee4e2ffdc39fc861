// Package sdk is fabric's Go client and worker SDK: it creates executions
// and flows, and runs workers that claim, renew, complete, fail, delay and
// suspend them, speaking FlowFabric's Valkey data model through the
// flowfabric function library.
//
// A producer uses a [Client]:
//
//	c, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc}) // vc is a *valkey.Client
//	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{
//		Lane: "emails", Kind: "send_email", Payload: []byte(`{"to":"a@b"}`),
//		Policy: &sdk.Policy{MaxRetries: 3, Backoff: sdk.ExponentialBackoff(time.Second, time.Minute, 2)},
//	})
//
// A consumer runs a [Worker]:
//
//	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}})
//	defer w.Close(context.Background())
//	err := w.Run(ctx, func(ctx context.Context, job *sdk.Job) error {
//		return send(ctx, job.Payload) // nil completes, an error fails (retry per policy)
//	})
//
// On Postgres the same Worker, Lease, Job and Run work over a
// *postgres.Client: create with [ConnectPostgres] and produce with a
// Client whose ClientConfig.Postgres is set. Claims are SELECT … FOR
// UPDATE SKIP LOCKED transactions; suspension, streams, cancel and flows
// answer [ErrNotOnPostgres].
//
// # Notes
//
//   - Inputs are validated before any network call: a bad lane, priority,
//     delay or capability returns an error wrapping [ErrInvalidInput].
//   - Workers scan partitions themselves (FlowFabric's direct-claim path):
//     32 partitions per round in one pipelined round trip, starting at an
//     offset derived from the worker instance id, so idle workers spread
//     their reads. Budget and quota admission are the scheduler's job and
//     are not applied here, as in FlowFabric's SDK.
//   - Leases are renewed in the background at 2/3 of their TTL. A renewal
//     that finds the lease gone (stale, expired, revoked) cancels the
//     handler's context; the handler's later calls fail with the same code.
//   - Every type is safe for concurrent use unless its comment says
//     otherwise.
package sdk
