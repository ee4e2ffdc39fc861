//go:build !linux

package host

func mappingRss() map[uintptr]int64 { return nil }

func (a *instanceMemory) resident() int64 { return 0 }
