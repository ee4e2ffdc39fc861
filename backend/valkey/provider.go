package valkey

import "github.com/fabric-host/fabric/backend"

// Driver returns the backend.Driver over c (NewDriver(c)), so a *Client
// is a backend.Provider: sdk.Connect(ctx, c, cfg).
func (c *Client) Driver() backend.Driver { return NewDriver(c) }

// Driver returns d itself: a *Driver is a backend.Provider too.
func (d *Driver) Driver() backend.Driver { return d }

var (
	_ backend.Provider = (*Client)(nil)
	_ backend.Provider = (*Driver)(nil)
)
