package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/fcall"
)

// CallOf is the abi.Call of a model/fcall layout (Item unset: the
// failure tracker keys it by nothing unless the caller sets one).
func CallOf(c fcall.Call) abi.Call {
	return abi.Call{Function: c.Function, Keys: c.Keys, Args: c.Args}
}

// ReplyOf is the fcall.Reply of a call result for model/fcall's decoders,
// or nil unless the call returned {1, ...} (StatusOK).
func ReplyOf(r abi.CallResult) *fcall.Reply {
	if !r.OK() {
		return nil
	}
	return &fcall.Reply{Status: r.Status, Fields: r.Fields}
}

// AttemptIndexOf parses exec_core's current_attempt_index as read; an
// absent or malformed value is attempt 0.
func AttemptIndexOf(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
