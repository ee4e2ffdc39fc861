package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
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
	r, err := c.drv.TailStream(ctx, &backend.TailStreamParams{ReadStreamParams: backend.ReadStreamParams{ExecutionID: id,
		AttemptIndex: attempt, After: after, Count: count}, Block: block})
	if err != nil {
		return nil, false, fmt.Errorf("sdk: tail stream of %s: %w", id, err)
	}
	return streamFrames(r), r.Closed, nil
}

// ReadSummary returns an attempt's summary document (the JSON its
// FrameSummary frames were merged into, "" before the first) and its
// version (the number of patches applied).
func (c *Client) ReadSummary(ctx context.Context, id model.ExecutionID, attempt int) (doc string, version int64, err error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return "", 0, invalid("id", "%v", err)
	}
	sum, err := c.drv.ReadSummary(ctx, &backend.ReadSummaryParams{ExecutionID: id, AttemptIndex: attempt})
	if err != nil {
		return "", 0, fmt.Errorf("sdk: %w", err)
	}
	return sum.Document, sum.Version, nil
}

// streamFrames is a driver's read as the SDK's frames (nil when none).
func streamFrames(r *backend.StreamRead) []StreamFrame {
	var frames []StreamFrame
	for _, f := range r.Frames {
		frames = append(frames, StreamFrame{ID: f.ID, Fields: f.Fields})
	}
	return frames
}
