package postgres

import "context"

// CompleteBatchForTest writes ps as ONE group-commit batch (the flush a
// group of concurrent CompleteExecution calls shares) and returns each
// item's outcome.
func (c *Client) CompleteBatchForTest(ctx context.Context, ps []*CompleteExecutionParams) []error {
	rs := make([]*completeReq, len(ps))
	for i, p := range ps {
		k, err := splitExecID(p.ExecutionID)
		if err != nil {
			panic(err)
		}
		rs[i] = &completeReq{ctx: ctx, k: k, p: p, done: make(chan error, 1)}
	}
	c.flushCompleteBatch(rs)
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = <-r.done
	}
	return out
}
