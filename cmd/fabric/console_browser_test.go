package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin/consoletest"
)

// chromiumPath finds Debian's chromium (make test-deps, which make test runs, installs it).
func chromiumPath() string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// TestConsoleBrowser drives the web UI of a running `fabric run` (the
// demo workload on, plugins from bin/plugins when built) over a
// deployment seeded with known executions, a flow and a worker, in
// headless Chromium. It asserts on the DOM and saves a screenshot of each
// page under a temp dir (FABRIC_CONSOLE_SCREENSHOTS names another).
func TestConsoleBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("chromium is not installed (make test-deps installs Debian's chromium)")
	}
	srv := valkeytest.NewServer(t)
	s := consoletest.Seed(t, valkeytest.Dial(t, srv.URL(), 0))

	const token = "browser-token-7"
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	plugins := ""
	if _, err := os.Stat(filepath.Join("..", "..", "bin", "plugins")); err == nil {
		plugins = filepath.Join("..", "..", "bin", "plugins")
	}
	out := &syncBuffer{}
	hostCtx, stopHost := context.WithCancel(context.Background())
	exited := make(chan int)
	go func() {
		exited <- runCLI(hostCtx, &cliEnv{stdout: out, stderr: out}, []string{"run", "--valkey-url", srv.URL(),
			"--plugins", plugins, "--admin-addr", "127.0.0.1:0", "--admin-token-file", tokFile, "--view", "lines",
			"--rate", "20", "--lanes", "demo-a,demo-b", "--census-interval", "300ms", "--drain-timeout", "20s",
			"--status-file", filepath.Join(dir, "status.json")})
	}()
	t.Cleanup(func() {
		stopHost()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("fabric run exited %d\n%s", code, out)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("fabric run did not stop within 60s\n%s", out)
		}
	})
	var base string
	re := regexp.MustCompile(`console: (http://\S+)/ui/`)
	valkeytest.Eventually(t, 90*time.Second, "fabric run prints the console URL", func() bool {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	})

	shots := os.Getenv("FABRIC_CONSOLE_SCREENSHOTS")
	if shots == "" {
		var err error
		if shots, err = os.MkdirTemp("", "fabric-console-screens-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// The first run starts the browser, which lives as long as its
	// context: no timeout on that one, one on every step after it.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	bctx, cancelTimeout := context.WithTimeout(browser, 2*time.Minute)
	defer cancelTimeout()

	fail := func(step string, err error) {
		t.Helper()
		if png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(shots, "failure.png"), png, 0o644)
		}
		html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("main").outerHTML + " hash=" + location.hash`))
		t.Fatalf("%s: %v\npage: %s\nhost output:\n%s", step, err, html, out)
	}
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			fail(step, err)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	page := func(hash string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(chromedp.Navigate(base+"/ui/"+hash),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-loaded=%q]`, strings.TrimPrefix(hash, "#")))))
	}

	// Overview: the census from the running host (and its plugins).
	// The throughput chart draws the host's sampler history (a reading
	// every 300 ms): wait for a few before the picture.
	valkeytest.Eventually(t, 20*time.Second, "the overview charts 10 throughput readings", func() bool {
		do("overview", page("#/"))
		return evalJS[int](t, bctx, `Number(document.querySelector("#throughput-chart").dataset.points)`) >= 10
	})
	do("overview screenshot", shot("overview"))
	if n := evalJS[int](t, bctx, `document.querySelectorAll(".card").length`); n == 0 {
		t.Fatal("overview shows no execution counts")
	}
	if n := evalJS[int](t, bctx, `document.querySelectorAll("#plugins tbody tr").length`); plugins != "" && n == 0 {
		t.Fatal("overview lists no plugins although the host loaded bin/plugins")
	}

	// A plugin's detail: its grant and recent cycles (with bin/plugins).
	if plugins != "" {
		do("plugin detail", chromedp.Click(chromedp.CSS(`tr[data-plugin="delayed_promoter"] a.plugin-link`)),
			chromedp.WaitVisible(chromedp.CSS(`#plugin-name`)), shot("plugin"))
		// The page shows the plugin's state, whatever it is: on a machine
		// loaded by the rest of the suite a call may time out and the
		// plugin be quarantined for a while, which is for the host's tests.
		if st := evalJS[string](t, bctx, `document.querySelector("#plugin-state").dataset.state`); st != "running" && st != "quarantined" {
			t.Fatalf("delayed_promoter state %q", st)
		}
		valkeytest.Eventually(t, 20*time.Second, "the plugin page shows cycles", func() bool {
			do("reload plugin detail", page("#/plugin/delayed_promoter"))
			return evalJS[int](t, bctx, `document.querySelectorAll("#cycles tbody tr").length`) > 0
		})
		do("unknown plugin", page("#/plugin/nope"))
		if e := evalJS[string](t, bctx, `document.querySelector("#error").textContent`); !strings.Contains(e, "404") || !strings.Contains(e, `unknown plugin "nope"`) {
			t.Fatalf("unknown plugin page: %q", e)
		}
	}

	// Lanes, then a lane's executions.
	do("lanes", page("#/lanes"), shot("lanes"))
	if n := evalJS[int](t, bctx, `document.querySelectorAll("#lanes tbody tr").length`); n < 4 { // console-a/b, demo-a/b
		t.Fatalf("lanes page lists %d lanes", n)
	}
	do("executions of a lane", page("#/executions?lane="+consoletest.LaneA), shot("executions"))
	ids := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#executions tbody tr")].map(r => r.dataset.id)`)
	want := map[string]bool{string(s.Completed): true, string(s.Failed): true, string(s.Suspended): true, string(s.Eligible): true, string(s.Delayed): true,
		string(s.Completed2): true}
	if len(ids) != len(want) {
		t.Fatalf("lane %s lists %v", consoletest.LaneA, ids)
	}
	for _, id := range ids {
		if !want[id] {
			t.Fatalf("lane %s lists %s, not one of its executions", consoletest.LaneA, id)
		}
	}

	// Paging: two rows a page, the next page's link gives two others.
	do("first page", page("#/executions?lane="+consoletest.LaneA+"&limit=2"))
	first := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#executions tbody tr")].map(r => r.dataset.id)`)
	do("next page", chromedp.Click(chromedp.CSS(`#next-page`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded*="cursor=2"]`)))
	second := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#executions tbody tr")].map(r => r.dataset.id)`)
	if len(first) != 2 || len(second) != 2 || first[0] == second[0] || first[1] == second[0] || first[0] == second[1] || first[1] == second[1] {
		t.Fatalf("pages %v then %v", first, second)
	}

	// Back to the full listing; open one from it: the failed one shows
	// its attempt's error.
	do("executions again", page("#/executions?lane="+consoletest.LaneA))

	link := fmt.Sprintf(`tr[data-id=%q] a.exec-link`, string(s.Failed))
	if !evalJS[bool](t, bctx, fmt.Sprintf(`document.querySelector(%q) !== null`, link)) {
		t.Fatalf("no link %s in the listing", link)
	}
	do("open the failed execution",
		chromedp.Click(chromedp.CSS(link)),
		chromedp.WaitVisible(chromedp.CSS(`#attempts .attempt-error`)), shot("execution-failed"))
	if txt, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#attempts .attempt-error`))); err != nil || !strings.Contains(txt, "decoder exploded") {
		t.Fatalf("failed attempt error %q (%v)", txt, err)
	}

	// A flow: its DAG nodes carry their states.
	do("flow", page("#/flow/"+s.Flow.String()), shot("flow"))
	nodes := evalJS[map[string]string](t, bctx, `Object.fromEntries([...document.querySelectorAll("svg#dag g.node")].map(g => [g.dataset.id, g.dataset.state]))`)
	edges := evalJS[int](t, bctx, `document.querySelectorAll("svg#dag line.edge").length`)
	if nodes[string(s.Root)] != "completed" || nodes[string(s.Left)] != "active" || nodes[string(s.Right)] != "waiting" || len(nodes) != 3 || edges != 2 {
		t.Fatalf("flow DAG nodes %v, %d edges", nodes, edges)
	}

	// Workers.
	do("workers", page("#/workers"), shot("workers"))
	if w := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#workers tbody tr")].map(r => r.dataset.worker)`); !strings.Contains(strings.Join(w, ","), s.Worker) {
		t.Fatalf("workers page lists %v, not %s", w, s.Worker)
	}

	// Cancel: refused without the token, done with it.
	do("cancel without the token", page("#/execution/"+string(s.Eligible)),
		chromedp.Click(chromedp.CSS(`#action-cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#action-result.error`)), shot("cancel-refused"))
	refused, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#action-result`)))
	if err != nil {
		fail("read the refusal", err)
	}
	state := evalJS[string](t, bctx, `document.querySelector("#detail-state .state").dataset.state`)
	if !strings.Contains(refused, "403") || !strings.Contains(refused, "admin token required") || state != "waiting" {
		t.Fatalf("cancel without token: %q, state %q", refused, state)
	}
	do("cancel with the token",
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#action-cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#action-result.ok`)),
		chromedp.WaitVisible(chromedp.CSS(`#detail-state .state[data-state="cancelled"]`)), shot("cancel-done"))
}

// evalJS evaluates expr in the page and decodes its value.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}
