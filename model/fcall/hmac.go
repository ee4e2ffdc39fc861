package fcall

import (
	"strconv"

	"github.com/fabric-host/fabric/model"
)

// RotateHMACCall builds ff_rotate_waitpoint_hmac_secret: install kid on
// partition p; the previous kid keeps validating for graceMs.
//
//	KEYS[1] hmac_secrets  ARGV[1] new_kid  ARGV[2] new_secret_hex  ARGV[3] grace_ms
func RotateHMACCall(p model.Partition, kid, secretHex string, graceMs int64) Call {
	return Call{Function: "ff_rotate_waitpoint_hmac_secret",
		Keys: []string{model.KeysOn(p).WaitpointHMACSecrets()}, Args: []string{kid, secretHex, itoa(graceMs)}}
}

// RotateHMACResult is the reply of ff_rotate_waitpoint_hmac_secret.
type RotateHMACResult struct {
	// Outcome is rotated or noop.
	Outcome     string
	PreviousKid string
	NewKid      string
	// GCCount is the number of expired kids removed.
	GCCount int
}

// DecodeRotateHMAC reads ff_rotate_waitpoint_hmac_secret's reply.
func DecodeRotateHMAC(r *Reply) *RotateHMACResult {
	res := &RotateHMACResult{Outcome: r.Field(0)}
	if res.Outcome == "noop" {
		res.NewKid = r.Field(1)
		return res
	}
	res.PreviousKid, res.NewKid = r.Field(1), r.Field(2)
	res.GCCount, _ = strconv.Atoi(r.Field(3))
	return res
}

// ListHMACKidsCall builds ff_list_waitpoint_hmac_kids of partition p.
//
//	KEYS[1] hmac_secrets
func ListHMACKidsCall(p model.Partition) Call {
	return Call{Function: "ff_list_waitpoint_hmac_kids", Keys: []string{model.KeysOn(p).WaitpointHMACSecrets()}}
}

// HMACKid is a non-current kid still inside its grace window.
type HMACKid struct {
	Kid       string
	ExpiresAt int64
}

// HMACKids is the reply of ff_list_waitpoint_hmac_kids.
type HMACKids struct {
	CurrentKid string
	Verifying  []HMACKid
}

// DecodeHMACKids reads ff_list_waitpoint_hmac_kids' reply.
func DecodeHMACKids(r *Reply) *HMACKids {
	res := &HMACKids{CurrentKid: r.Field(0)}
	n, _ := strconv.Atoi(r.Field(1))
	for i := 0; i < n; i++ {
		exp, _ := strconv.ParseInt(r.Field(3+2*i), 10, 64)
		res.Verifying = append(res.Verifying, HMACKid{Kid: r.Field(2 + 2*i), ExpiresAt: exp})
	}
	return res
}
