package pdk

import (
	"errors"

	"github.com/fabric-host/fabric/abi"
)

// IsDryRun reports whether err is the host's answer to a write made by a
// shadow run (a candidate version running beside the live one): the host
// recorded the write and did not send it (abi.CodeDryRun). The FCALLs of
// a shadow come back abi.StatusDryRun (CallResult.DryRun) instead. Most
// plugins need not care: pdk counts a dry-run call as acted.
func IsDryRun(err error) bool { return errors.Is(err, abi.CodeDryRun) }
