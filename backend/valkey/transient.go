package valkey

import (
	"context"
	"errors"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
)

// transientPrefixes are the error replies a server gives while it cannot
// serve for a moment (a long script: BUSY; loading its data; failing over).
var transientPrefixes = []string{"BUSY ", "LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN "}

// IsTransient reports whether err is a backend's passing bad moment
// rather than a refusal: a transient error reply, or a connection reset,
// refused or cut short.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if ve, ok := asValkeyError(err); ok {
		msg := ve.Error()
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	if backend.NetworkTransient(err) {
		return true
	}
	// Wrapped as text by a layer that did not keep the reply's type.
	msg := err.Error()
	for _, p := range transientPrefixes {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func asValkeyError(err error) (*vk.ValkeyError, bool) {
	var ve *vk.ValkeyError
	if errors.As(err, &ve) && !ve.IsNil() {
		return ve, true
	}
	return nil, false
}

// IsTransient implements backend.Driver (IsTransient).
func (d *Driver) IsTransient(err error) bool { return IsTransient(err) }
