package inspect_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/inspect"
	"agentsociety/internal/demo"
)

// hangGuard bounds every wait of the tests. They wait for what they expect
// and never for a time; the guard only turns a hang into a failure.
const hangGuard = time.Minute

// newSociety returns a society on cfg (the demo model when cfg has none),
// closed when the test ends.
func newSociety(t testing.TB, cfg as.Config) *as.Society {
	t.Helper()
	if cfg.Model == nil {
		cfg.Model = demo.Model()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// serve serves the inspector of s on loopback until the test ends.
func serve(t testing.TB, s *as.Society, opts inspect.Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(inspect.New(s, opts))
	t.Cleanup(srv.Close)
	return srv
}

// runQuickstart submits the quick start's requirement and waits until user
// has the artifact and the task is no longer running. It returns the task
// and the artifact's id.
func runQuickstart(t testing.TB, s *as.Society) (task, artifact string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	if err != nil {
		t.Fatal(err)
	}
	text := reply.Text()
	ref := text[strings.Index(text, as.ArtifactRefPrefix):]
	if i := strings.IndexFunc(ref[len(as.ArtifactRefPrefix):], func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
	}); i >= 0 {
		ref = ref[:len(as.ArtifactRefPrefix)+i]
	}
	artifact, err = as.ParseArtifactRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to stop running", func() bool {
		for _, ti := range s.Tasks() {
			if ti.ID == task {
				return ti.State != as.TaskRunning
			}
		}
		return false
	})
	return task, artifact
}

// waitFor polls cond until it holds, failing the test after hangGuard.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", hangGuard, what)
		}
	}
}

// do makes a request and returns the status, the headers and the body.
func do(t testing.TB, method, url, contentType, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// getJSON gets url, expects 200, and decodes the body into a T.
func getJSON[T any](t testing.TB, url string) T {
	t.Helper()
	status, _, body := do(t, "GET", url, "", "")
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
	return v
}

// validBrief is a Task Brief the society accepts.
func validBrief() *as.TaskBrief {
	return &as.TaskBrief{
		Objective:          "build a calculator",
		Constraints:        []string{"HTML + JavaScript", "static page"},
		Inputs:             "numbers and operators",
		Outputs:            "the result on the page",
		CompletionCriteria: "the four operations work",
	}
}

// spawn has root spawn an agent on task driven by b, on a role of its own
// named role.
func spawn(t testing.TB, s *as.Society, task, role string, b as.Behavior) *as.Actor {
	t.Helper()
	ctx := context.Background()
	root, err := s.Actor(as.RootID)
	if err != nil {
		t.Fatal(err)
	}
	root = root.WithTask(task)
	r, _, err := root.CreateRole(ctx, as.RoleSpec{Name: role, Prompt: "work"})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: validBrief(), Behavior: b})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Actor(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
