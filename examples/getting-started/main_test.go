package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/fabrictest"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(fabrictest.Main(m)) }

// TestGettingStarted runs the example against real servers, Valkey and
// Postgres (the kit's), and checks what it prints.
func TestGettingStarted(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(testing.TB) *sdk.Client
	}{{"Valkey", fabrictest.Valkey}, {"Postgres", fabrictest.Postgres}} {
		t.Run(be.name, func(t *testing.T) {
			c := be.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, c, slog.New(slog.DiscardHandler), &out); err != nil {
				t.Fatal(err)
			}
			want := "welcomed Ann <ann@example.com>\nwelcomed Bob <bob@example.com>\nwelcomed Cy <cy@example.com>\n"
			if out.String() != want {
				t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
			}
		})
	}
}

// TestReadmeQuotesThisExample: every line of the Go blocks of the README's
// SDK section is a line of this example, so the README cannot drift from
// code that runs.
func TestReadmeQuotesThisExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## The Go SDK\n")
	if !ok {
		t.Fatal("README has no SDK section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	lines := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	blocks, quoted := strings.Split(section, "```"), 0
	for i := 1; i < len(blocks); i += 2 {
		for _, l := range strings.Split(strings.TrimPrefix(blocks[i], "go\n"), "\n") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			quoted++
			if !lines[l] {
				t.Errorf("README line not in examples/getting-started/main.go: %s", l)
			}
		}
	}
	if quoted < 10 {
		t.Fatalf("only %d quoted lines found", quoted)
	}
}
