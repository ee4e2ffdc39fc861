package valkey_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestServerDiesWithHost starts a server from a child process (this test
// binary re-executed), kills that child with SIGKILL, as a crash would, and
// checks that the server child does not outlive it.
func TestServerDiesWithHost(t *testing.T) {
	t.Parallel()
	if os.Getenv("FABRIC_SERVER_HOST_CHILD") == "1" {
		return // in the child, only TestHelperServerHost does anything
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServerHost$")
	cmd.Env = append(os.Environ(), "FABRIC_SERVER_HOST_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	pid := 0
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SERVER_PID="); ok {
			pid, _ = strconv.Atoi(v)
			break
		}
	}
	if pid == 0 {
		t.Fatal("child never reported its server pid")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("server %d not running before the kill: %v", pid, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	valkeytest.Eventually(t, 30*time.Second, fmt.Sprintf("server pid %d gone after its host was killed", pid), func() bool {
		// A zombie would still answer kill(0); reap through /proc state.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// TestHelperServerHost is the child side of TestServerDiesWithHost.
func TestHelperServerHost(t *testing.T) {
	if os.Getenv("FABRIC_SERVER_HOST_CHILD") != "1" {
		return // helper process for TestServerDiesWithHost; a no-op otherwise
	}
	s, err := valkey.StartServer(context.Background(), valkey.ServerConfig{Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SERVER_PID=%d\n", s.PID())
	select {} // wait to be killed
}
