package backend

// Provider is what the SDK's constructors (sdk.Connect, sdk.NewClient)
// take as their backend: a driver's client (*valkey.Client,
// *postgres.Client) or a Driver itself. Driver returns the
// backend.Driver over it; the constructor dispatches on that driver's
// type.
type Provider interface {
	// Driver returns the backend.Driver of the provider.
	Driver() Driver
}
