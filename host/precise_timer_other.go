//go:build !linux

package host

import "time"

// sleepPrecise sleeps d (the runtime's timers: no finer sleep is used on
// this system).
func sleepPrecise(d time.Duration) { time.Sleep(d) }
