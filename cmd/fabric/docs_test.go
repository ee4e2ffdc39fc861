package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsKeepUp: the README shows every command and names every source
// directory in its layout, and no help text sends the reader to a source
// file or a Go identifier (help is for people running the binary).
func TestDocsKeepUp(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range commands {
		if !strings.Contains(string(readme), "fabric "+name) {
			t.Errorf("README.md does not show `fabric %s`", name)
		}
	}

	// The layout table: every top-level directory and every backend.
	dirs, _ := filepath.Glob("../../*")
	backends, _ := filepath.Glob("../../backend/*")
	for _, d := range append(dirs, backends...) {
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() || strings.HasPrefix(filepath.Base(d), ".") || filepath.Base(d) == "bin" {
			continue
		}
		rel, _ := filepath.Rel("../..", d)
		if !strings.Contains(string(readme), "`"+filepath.ToSlash(rel)+"/") {
			t.Errorf("README.md's layout lacks `%s/`", rel)
		}
	}

	source := regexp.MustCompile(`\b\w+\.go\b|host\.Config|\bsee \w+\.go`)
	for name, c := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.setup(fs)
		texts := []string{c.summary}
		fs.VisitAll(func(f *flag.Flag) { texts = append(texts, f.Usage) })
		for _, s := range texts {
			// main.go is the file `fabric plugin new` writes, not ours.
			if m := source.FindString(strings.ReplaceAll(s, "main.go", "")); m != "" {
				t.Errorf("fabric %s help names %q: %s", name, m, s)
			}
		}
	}
}
