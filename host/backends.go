package host

import (
	"context"
	"reflect"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/model"
)

// Backend is what the host needs of a Valkey deployment besides plugin
// data (Config.Store, defaulted from it): its partition config, the
// server clock, keyevent wake notifications, the completion channel, the
// wake probe's reads and the partition-lease registry. *valkey.Client
// implements it; the host names no driver package (TestHostImportsNoDriver).
type Backend interface {
	// Partitions is the deployment's partition config.
	Partitions() model.PartitionConfig
	// ServerTime is the server's clock in milliseconds.
	ServerTime(ctx context.Context) (int64, error)
	// EnableZaddKeyevents and WatchZaddKeyevents are the due-timer wake
	// notifications (wake_listener.go); a watch that ends because the
	// backend's nodes changed matches backend.ErrTopologyChanged.
	keyeventSource
	// SubscribeChannel holds one subscription to channel on a dedicated
	// connection named connName until it breaks or ctx ends, calling
	// onSubscribed once it is confirmed and onMessage with every message;
	// it reports whether it was confirmed (completion_service.go).
	SubscribeChannel(ctx context.Context, channel, connName string, onMessage func(msg string), onSubscribed func()) (bool, error)
	// LowestScores reads, in one round trip, the lowest-scored member of
	// every sorted set in keys (wakeprobe.go).
	LowestScores(ctx context.Context, keys []string) []backend.LowestScore
	// The partition-lease registry (host/partlease).
	partlease.Backend
}

// microsBackend is a Backend that reads the server's clock to the
// microsecond (*valkey.Client does): the host's server clock keeps that
// precision rather than a millisecond reading's (serverclock.go).
type microsBackend interface {
	ServerTimeMicros(ctx context.Context) (int64, error)
}

// isNilPointer reports a typed nil pointer in x (a nil *valkey.Client or
// *pgxpool.Pool in an interface field), which the host treats as none.
func isNilPointer(x any) bool {
	v := reflect.ValueOf(x)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
