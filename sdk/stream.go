package sdk

import (
	"context"
	"fmt"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
)

// TailAttemptStream waits up to block for frames of an attempt's stream
// after entry id after ("" = from the start) and returns up to count of
// them (XREAD BLOCK, as FlowFabric's tail): nil frames when none came in
// time. closed reports an attempt whose stream was closed (the attempt
// ended); a reader follows a stream by calling it again with the last
// frame's ID until closed and no frames.
func (c *Client) TailAttemptStream(ctx context.Context, id model.ExecutionID, attempt int, after string, block time.Duration, count int) (frames []StreamFrame, closed bool, err error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return nil, false, invalid("id", "%v", err)
	}
	if attempt < 0 || count < 1 || count > 10000 {
		return nil, false, invalid("stream", "attempt must be >= 0 and count in 1..10000")
	}
	if block < time.Millisecond {
		return nil, false, invalid("stream.block", "must be at least 1ms (got %s)", block)
	}
	if c.vc == nil {
		return c.pgReadStream(ctx, id, attempt, after, count, block)
	}
	if after == "" {
		after = "0-0"
	}
	k := model.KeysFor(id)
	raw := c.vc.Raw()
	// valkey-go sends blocking commands on pooled connections, so the
	// wait does not stall the shared pipeline.
	res, err := raw.Do(ctx, raw.B().Xread().Count(int64(count)).Block(block.Milliseconds()).
		Streams().Key(k.Stream(attempt)).Id(after).Build()).AsXRead()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, false, fmt.Errorf("sdk: tail stream of %s: %w", id, err)
	}
	for _, e := range res[k.Stream(attempt)] {
		frames = append(frames, StreamFrame{ID: e.ID, Fields: e.FieldValues})
	}
	closedAt, err := raw.Do(ctx, raw.B().Hget().Key(k.StreamMeta(attempt)).Field("closed_at").Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, false, fmt.Errorf("sdk: read stream meta of %s: %w", id, err)
	}
	return frames, closedAt != "", nil
}

// ReadSummary returns an attempt's summary document (the JSON its
// FrameSummary frames were merged into, "" before the first) and its
// version (the number of patches applied).
func (c *Client) ReadSummary(ctx context.Context, id model.ExecutionID, attempt int) (doc string, version int64, err error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return "", 0, invalid("id", "%v", err)
	}
	if c.vc == nil {
		doc, version, err := c.pg.ReadSummary(ctx, id, attempt)
		if err != nil {
			return "", 0, fmt.Errorf("sdk: %w", err)
		}
		return doc, version, nil
	}
	s, err := c.vc.ReadSummary(ctx, id, attempt)
	if err != nil {
		return "", 0, fmt.Errorf("sdk: %w", err)
	}
	return s.Document, s.Version, nil
}
