package postgres

import (
	"context"
	"fmt"
)

// WatchTerminal implements backend.Driver: the schema checked
// (backend.ErrNotMigrated), then LISTEN ff_completion on a
// dedicated connection — FlowFabric's completion outbox notifies every
// execution's terminal event, in a flow or not — waking with partition -1
// (the payload is only the event id) on each notification.
func (d *Driver) WatchTerminal(ctx context.Context, wake func(partition int), onUp func()) error {
	// A database without the schema would never notify: say so instead.
	if err := CheckSchema(ctx, d.c.Pool()); err != nil {
		return mapErr(err, false)
	}
	conn, err := d.c.dialListen(ctx, CompletionChannel)
	if err != nil {
		return fmt.Errorf("watch terminal transitions: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	onUp()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch terminal transitions: %w", err)
		}
		wake(-1)
	}
}
