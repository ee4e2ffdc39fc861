package main

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestRunPostgresFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		on   bool
		bad  bool
	}{
		{args: nil, on: false},
		{args: []string{"--backend", "postgres"}, on: true},
		{args: []string{"--postgres-url", "postgres://x/db"}, on: true},
		{args: []string{"--backend", "mysql"}, bad: true},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addRunPostgresFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		on, err := f.enabled()
		if tc.bad {
			if !errors.Is(err, errUsage) {
				t.Fatalf("%v: err = %v", tc.args, err)
			}
			continue
		}
		if err != nil || on != tc.on {
			t.Fatalf("%v: on = %v, %v", tc.args, on, err)
		}
	}
}
