package sdk_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocSnippetsCompile builds the code of the package comment (doc.go),
// so a signature change cannot leave it behind (it called
// sdk.NewClient(ctx, vc) long after NewClient took a ClientConfig). The
// snippets' free names are ctx, vc (a *valkey.Client), c (a *sdk.Client)
// and send.
func TestDocSnippetsCompile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	for _, l := range strings.Split(string(src), "\n") {
		if code, ok := strings.CutPrefix(l, "//\t"); ok {
			cur = append(cur, code)
			continue
		}
		if len(cur) > 0 {
			blocks = append(blocks, cur)
			cur = nil
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no code in doc.go's comment")
	}
	var b strings.Builder
	b.WriteString(`package docexample

import (
	"context"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/sdk"
)

var (
	ctx context.Context
	vc  *valkey.Client
	c   *sdk.Client
	_   = time.Second
)

func send(context.Context, []byte) error { return nil }
`)
	for i, blk := range blocks {
		body := strings.Join(blk, "\n")
		// The names the snippet declares are used once more, so that
		// "declared and not used" is no error of the snippet's.
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+body+"\n}", 0)
		if err != nil {
			t.Fatalf("doc.go snippet %d does not parse: %v\n%s", i, err, body)
		}
		var uses []string
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				for _, e := range as.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						uses = append(uses, "_ = "+id.Name)
					}
				}
			}
			return true
		})
		fmt.Fprintf(&b, "\nfunc snippet%d() {\n%s\n%s\n}\n", i, body, strings.Join(uses, "\n"))
	}
	dir, err := os.MkdirTemp(".", "docexample")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "doc.go"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("doc.go's code does not compile: %v\n%s\n--- the code:\n%s", err, out, b.String())
	}
}
