package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend"
)

// TailStream implements backend.AttemptReadDriver (Client.TailStream:
// LISTEN on the attempt's channel, read, wait for a notification).
func (d *Driver) TailStream(ctx context.Context, p *backend.TailStreamParams) (*backend.StreamRead, error) {
	if p.Block < time.Millisecond {
		return nil, fmt.Errorf("%w: tail stream of %s: block must be at least 1ms (got %s)", backend.ErrInvalidInput, p.ExecutionID, p.Block)
	}
	r, err := d.c.TailStream(ctx, &p.ReadStreamParams, p.Block)
	return r, mapControlErr(err, false)
}

// ReadSummary implements backend.AttemptReadDriver (ff_stream_summary).
func (d *Driver) ReadSummary(ctx context.Context, p *backend.ReadSummaryParams) (*backend.Summary, error) {
	doc, version, err := d.c.ReadSummary(ctx, p.ExecutionID, p.AttemptIndex)
	if err != nil {
		return nil, mapControlErr(err, false)
	}
	return &backend.Summary{Document: doc, Version: version}, nil
}

// ResumeSignals implements backend.AttemptReadDriver (the satisfied_set
// of ff_suspension_current). Postgres keeps no per-waitpoint satisfiers:
// a WaitpointID is backend.ErrUnsupported.
func (d *Driver) ResumeSignals(ctx context.Context, p *backend.ResumeSignalsParams) ([]backend.ResumeSignal, error) {
	if p.WaitpointID != "" {
		return nil, fmt.Errorf("resume signals of %s: the satisfiers of waitpoint %s: %w", p.ExecutionID, p.WaitpointID, backend.ErrUnsupported)
	}
	sigs, err := d.c.ResumeSignals(ctx, p.ExecutionID, p.AttemptIndex)
	return sigs, mapControlErr(err, false)
}
