package inspect_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	as "agentsociety"
	"agentsociety/inspect"

	"github.com/chromedp/chromedp"
)

// chromium returns the browser the browser test drives: $CHROMIUM, or
// Debian's chromium package. Its absence fails the test: .ci/run installs
// the package when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no Chromium at %s (%v): install Debian's chromium package (apt-get install -y chromium), as .ci/run does, or set CHROMIUM to a Chromium binary", path, err)
	}
	return path
}

// browser starts a headless Chromium with a fresh profile, with the flags
// that keep it from reaching for the network (DESIGN §5), and returns a
// context for one tab, ended when the test ends. Each step is bounded by
// the hang guard (see must and run).
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	ctx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first run starts the browser, which lives as long as the
	// context of that run: start it on ctx, not on a step's.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	return ctx
}

// must runs actions in ctx, failing the test with what if they fail.
func must(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, dump(ctx))
	}
}

// dump returns what the page shows, to tell why a step failed.
func dump(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "the page cannot be read: " + err.Error()
	}
	return "the page reads:\n" + text
}

// waitTrue waits until the JavaScript expression is truthy; the test's
// context is the only bound.
func waitTrue(expression string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingTimeout(0))
}

// click waits for the element that the CSS selector sel matches and clicks
// it, in one step of the page's own script: the page redraws a part when
// what it shows changes, and a node found in one step may be gone in the
// next.
func click(sel string) chromedp.Action[chromedp.Void] {
	return waitTrue(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel))
}

// run runs one action in ctx and returns its value, failing the test with
// what if it fails.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, dump(ctx))
	}
	return v
}

// TestBrowser drives the inspector in headless Chromium: the page is open
// before the task starts, and the organisation tree grows in it; the task's
// messages are listed, and a message sent afterwards, by the host and from
// the page's own form, appears without a reload; the calculator artifact
// renders in its sandboxed frame, where its script runs (6 + 7 = 13) and
// cannot reach the inspector. It takes a screenshot and checks it decodes
// to a page-sized image; with INSPECT_SCREENSHOT=1 it writes it to
// docs/inspector.png.
func TestBrowser(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{AllowSend: true})
	ctx := browser(t)

	must(t, ctx, "opening the page",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#org .node[data-id="root"]`)),
	)
	// A reload would lose this.
	run(t, ctx, "marking the page", chromedp.Evaluate[string](`window.inspectorTestMark = "kept"`))

	// The organisation appears as the task runs.
	task, artifact := runQuickstart(t, s)
	agents := s.Agents()
	for _, a := range agents {
		must(t, ctx, "waiting for agent "+a.ID, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#org .node[data-id=%q]`, a.ID))))
	}
	tree := run(t, ctx, "reading the tree", chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll('#org li.agent')].map(li =>
			[li.dataset.id, li.parentElement.closest('li.agent')?.dataset.id ?? ""]))`))
	for _, a := range agents {
		if tree[a.ID] != a.ParentID {
			t.Errorf("in the page, %s is under %q, want %q (tree %v)", a.ID, tree[a.ID], a.ParentID, tree)
		}
		r, _ := s.Role(a.RoleID)
		label := run(t, ctx, "reading a node", chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('#org .node[data-id=%q]').textContent`, a.ID)))
		if !strings.Contains(label, r.Name) || !strings.Contains(label, a.ID) || !strings.Contains(label, string(a.Status)) {
			t.Errorf("node of %s reads %q, want its role %q, id and status", a.ID, label, r.Name)
		}
	}
	if tree[as.UserID] != "" || tree[as.RootID] != "" {
		t.Errorf("root and user are not at the top of the tree: %v", tree)
	}

	// The task's messages so far.
	accepted := 0
	for e, err := range s.Events(context.Background(), 1) {
		if err == nil && e.Kind == as.EventMessageAccepted && e.Task == task {
			accepted++
		}
	}
	must(t, ctx, "selecting the task",
		click(fmt.Sprintf(`#tasks tr[data-task=%q]`, task)),
		waitTrue(fmt.Sprintf(`document.querySelectorAll('#messages li.msg').length >= %d`, accepted)),
	)

	// A message the host sends now appears, without a reload.
	lead := agents[0].ID
	m, err := s.SendTextToAgent(context.Background(), lead, "Please also add a clear button.", "")
	if err != nil {
		t.Fatal(err)
	}
	must(t, ctx, "waiting for the host's message", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#messages li[data-id=%q]`, m.ID))))

	// And one sent from the page's form, as user.
	must(t, ctx, "sending from the page",
		click(fmt.Sprintf(`#org .node[data-id=%q]`, lead)),
		chromedp.WaitVisible(chromedp.ID("send-text")),
		chromedp.SendKeys(chromedp.ID("send-text"), "Sent from the inspector."),
		chromedp.Click(chromedp.ID("send")),
		waitTrue(`document.getElementById('send-result').textContent.startsWith('sent ')`),
	)
	result := run(t, ctx, "reading the send result", chromedp.Text(chromedp.ID("send-result")))
	sentID := strings.TrimPrefix(result, "sent ")
	must(t, ctx, "waiting for the page's message", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#messages li[data-id=%q]`, sentID))))
	found := false
	for e, err := range s.Events(context.Background(), 1) {
		if err == nil && e.Kind == as.EventMessageAccepted && e.Message.ID == sentID {
			found = e.Agent == as.UserID && e.Target == lead && e.Message.Text() == "Sent from the inspector."
		}
	}
	if !found {
		t.Errorf("the society has no message %s from user to %s with the page's text", sentID, lead)
	}

	// The calculator renders in its frame, and its script runs there.
	must(t, ctx, "showing the artifact",
		click(fmt.Sprintf(`#artifacts button[data-id=%q]`, artifact)),
		chromedp.WaitVisible(chromedp.CSS(`#artifact-frame[data-loaded]`)),
	)
	frame := frameContext(t, ctx, "/api/artifacts/"+artifact+"/content")
	must(t, frame, "using the calculator",
		chromedp.WaitVisible(chromedp.ID("eq")),
		chromedp.Click(chromedp.ID("eq")),
		waitTrue(`document.getElementById('result').textContent === '13'`),
	)
	reach := run(t, frame, "reaching out of the frame", chromedp.Evaluate[string](
		`(() => { try { return 'reached ' + window.parent.document.title } catch (e) { return 'blocked: ' + self.origin } })()`))
	if reach != "blocked: null" {
		t.Errorf("the artifact's script, reaching for the inspector: %q, want blocked in an opaque origin", reach)
	}

	// The page as a whole.
	state := run(t, ctx, "reading the page", chromedp.Evaluate[map[string]any](`({
		mark: window.inspectorTestMark,
		conn: document.getElementById('conn').dataset.state,
		errors: [...document.querySelectorAll('.error')].map(e => e.textContent),
		requests: document.querySelectorAll('#requests li').length,
		contacts: document.querySelectorAll('#agent .contacts li').length,
	})`))
	if state["mark"] != "kept" || state["conn"] != "live" || len(state["errors"].([]any)) != 0 || state["contacts"].(float64) == 0 {
		t.Errorf("the page: %v; want it not reloaded, live, without errors, the lead's contacts shown", state)
	}

	shot := run(t, ctx, "taking a screenshot", chromedp.CaptureScreenshot())
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	colours := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if b.Dx() < 1000 || b.Dy() < 700 || len(colours) < 32 {
		t.Errorf("the screenshot is %dx%d with %d colours: not a rendered page", b.Dx(), b.Dy(), len(colours))
	}
	if os.Getenv("INSPECT_SCREENSHOT") != "" {
		path := filepath.Join("..", "docs", "inspector.png")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%dx%d)", path, b.Dx(), b.Dy())
	}
}

// frameContext returns a context that runs actions in the frame of the tab
// in ctx whose URL ends with suffix. A sandboxed frame has an opaque
// origin, so Chromium may run it in a process, and a target, of its own.
func frameContext(t *testing.T, ctx context.Context, suffix string) context.Context {
	t.Helper()
	infos, err := chromedp.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, info := range infos {
		if info.Type == "iframe" && strings.HasSuffix(info.URL, suffix) {
			fctx, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(info.TargetID))
			t.Cleanup(cancel)
			// Attach on fctx itself: the session lives as long as the
			// context of the first run.
			if err := chromedp.Do(fctx); err != nil {
				t.Fatalf("attaching to the frame: %v", err)
			}
			return fctx
		}
		seen = append(seen, info.Type+" "+info.URL)
	}
	t.Fatal(errors.New("no frame target for " + suffix + " among " + strings.Join(seen, ", ")))
	return nil
}

// TestBrowser_EventsOff opens the page of a society that keeps no events:
// it said "society closed" and gave up, though the society ran. It says
// that events are off, shows an agent spawned after it loaded (it reloads
// what it shows), and says closed when the society closes.
func TestBrowser_EventsOff(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: -1})
	srv := serve(t, s, inspect.Options{})
	ctx := browser(t)

	must(t, ctx, "opening the page",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#org .node[data-id="root"]`)),
		waitTrue(`['off', 'closed'].includes(document.getElementById('conn').dataset.state)`),
	)
	if state := run(t, ctx, "reading the connection", chromedp.Evaluate[string](`document.getElementById('conn').dataset.state`)); state != "off" {
		t.Fatalf("the page of a running society without events shows %q, want off\n%s", state, dump(ctx))
	}
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	must(t, ctx, "waiting for the new agent", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#org .node[data-id=%q]`, worker.ID()))))

	cctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatal(err)
	}
	must(t, ctx, "waiting for the close", chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="closed"]`)))
}
