package backend

// Provider is what the SDK's constructors (sdk.Connect, sdk.NewClient)
// take as their backend: a driver's client (*valkey.Client,
// *postgres.Client) or a Driver itself. Driver returns the
// backend.Driver over it; the constructors work through that driver
// alone, whatever its backend.
type Provider interface {
	// Driver returns the backend.Driver of the provider, nil when the
	// provider has no connection (a nil client or driver).
	Driver() Driver
}
