package redact

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"unix:///tmp/x/valkey.sock", "unix:///tmp/x/valkey.sock"},
		{"redis://:s3cret@127.0.0.1:6379/2", "redis://:xxxxx@127.0.0.1:6379/2"},
		{"rediss://alice:s3cret@cache.example:6380?dial_timeout=2s", "rediss://alice:xxxxx@cache.example:6380?dial_timeout=2s"},
		{"redis://alice@127.0.0.1:6379", "redis://alice@127.0.0.1:6379"},
		{"valkey+cluster://bob:p%40ss@10.0.0.1:7000,10.0.0.2:7000", "valkey+cluster://bob:xxxxx@10.0.0.1:7000,10.0.0.2:7000"},
		{"redis://:pa/ss@host:1", "redis://:xxxxx@host:1"},
		{"redis://:pa?ss@host:1", "redis://:xxxxx@host:1"},
		{"redis://:a@b@host:1", "redis://:xxxxx@host:1"},
		{"unix://:pw@/tmp/s.sock", "unix://:xxxxx@/tmp/s.sock"},
		{"postgres://app:hunter2@db:5432/fabric?sslmode=verify-full", "postgres://app:xxxxx@db:5432/fabric?sslmode=verify-full"},
		{"postgres://app@db/fabric?password=hunter2&sslmode=require", "postgres://app@db/fabric?password=xxxxx&sslmode=require"},
		{"postgres://app@db/fabric?sslpassword=k3y", "postgres://app@db/fabric?sslpassword=xxxxx"},
		{"host=db user=app password=hunter2 dbname=fabric", "host=db user=app password=xxxxx dbname=fabric"},
		{"host=db password='hun ter\\'2' dbname=fabric", "host=db password=xxxxx dbname=fabric"},
		{"host=db PASSWORD = hunter2", "host=db PASSWORD = xxxxx"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSecretsAndError(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"redis://:s3cret@h:1", []string{"s3cret"}},
		{"redis://u:p%40ss@h:1", []string{"p%40ss", "p@ss"}},
		{"postgres://u@h/d?password=x1&sslmode=disable", []string{"x1"}},
		{"host=h password='a b'", []string{"a b"}},
		{"redis://h:1", nil},
	} {
		if got := Secrets(c.in); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Secrets(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	cause := errors.New("dial redis://:s3cret@h:1: refused")
	err := fmt.Errorf("connect: %w", cause)
	red := Error(err, Secrets("redis://:s3cret@h:1")...)
	if strings.Contains(red.Error(), "s3cret") || !strings.Contains(red.Error(), "refused") {
		t.Fatalf("Error: %q", red)
	}
	if !errors.Is(red, cause) {
		t.Fatal("the redacted error does not unwrap to its cause")
	}
	if plain := errors.New("no secret here"); Error(plain, "s3cret") != plain {
		t.Fatal("an error without secrets was rewrapped")
	}
}

func TestHandler(t *testing.T) {
	var buf strings.Builder
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), "s3cret", ""))
	log.Info("dial redis://:s3cret@h failed", "url", "redis://:s3cret@h", "error", errors.New("auth s3cret refused"),
		slog.Group("conn", "dsn", "password=s3cret"), "n", 3)
	log.With("pw", "s3cret").WithGroup("g").Warn("again", "x", "s3cret")
	out := buf.String()
	if strings.Contains(out, "s3cret") {
		t.Fatalf("a secret reached the log:\n%s", out)
	}
	for _, want := range []string{"redis://:xxxxx@h", "auth xxxxx refused", `conn.dsn="password=xxxxx"`, "n=3", "pw=xxxxx", "g.x=xxxxx"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if h := slog.NewTextHandler(&buf, nil); Handler(h) != slog.Handler(h) {
		t.Error("a handler without secrets was wrapped")
	}
}
