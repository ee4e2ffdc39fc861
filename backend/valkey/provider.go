package valkey

import "github.com/fabric-host/fabric/backend"

// Driver returns the backend.Driver over c (NewDriver(c); nil when c is
// nil), so a *Client is a backend.Provider: sdk.Connect(ctx, c, cfg).
func (c *Client) Driver() backend.Driver {
	if c == nil {
		return nil
	}
	return NewDriver(c)
}

// Driver returns d itself (nil when d or its client is nil): a *Driver is
// a backend.Provider too.
func (d *Driver) Driver() backend.Driver {
	if d == nil || d.c == nil {
		return nil
	}
	return d
}

var (
	_ backend.Provider = (*Client)(nil)
	_ backend.Provider = (*Driver)(nil)
)
