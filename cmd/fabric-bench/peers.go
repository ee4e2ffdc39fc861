package main

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// peerResult is what a bench/peers mode prints (see bench/peers/main.go).
type peerResult struct {
	Mode    string  `json:"mode"`
	Version string  `json:"version"`
	Jobs    int64   `json:"jobs"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	Capped  bool    `json:"capped"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
	RSSKiB  int64   `json:"rss_kib"`
}

func decodePeer(out []byte) (*peerResult, error) {
	var r peerResult
	line := bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("peers: decode %q: %w", line, err)
	}
	return &r, nil
}
