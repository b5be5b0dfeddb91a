package inspect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/inspect"
	"agentsociety/internal/demo"
)

// org mirrors the answer of GET /api/org, as the page reads it.
type org struct {
	LastEvent     uint64 `json:"last_event"`
	AllowSend     bool   `json:"allow_send"`
	ContactPolicy string `json:"contact_policy"`
	Roles         []struct {
		ID, Name string
	} `json:"roles"`
	Agents []agentView `json:"agents"`
}

type agentView struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Parent   string `json:"parent"`
	Task     string `json:"task"`
	Status   string `json:"status"`
	Queued   int    `json:"queued"`
	Handling string `json:"handling"`
	Contacts []struct {
		ID     string `json:"id"`
		Source string `json:"source"`
	} `json:"contacts"`
	Usage *struct {
		ModelCalls int64     `json:"model_calls"`
		Budget     as.Budget `json:"budget"`
	} `json:"usage"`
	Brief *as.TaskBrief `json:"brief"`
}

func (o org) agent(id string) agentView {
	for _, a := range o.Agents {
		if a.ID == id {
			return a
		}
	}
	return agentView{}
}

// TestInspect_Org runs the quick start and checks the organisation, the
// tasks and an agent's detail as the API shows them.
func TestInspect_Org(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	task, _ := runQuickstart(t, s)

	o := getJSON[org](t, srv.URL+"/api/org")
	if o.AllowSend || o.ContactPolicy != "open" {
		t.Errorf("allow_send %v, contact_policy %q", o.AllowSend, o.ContactPolicy)
	}
	if o.LastEvent == 0 || o.LastEvent > s.LastEvent() {
		t.Errorf("last_event %d, the society's last is %d", o.LastEvent, s.LastEvent())
	}
	ids := []string{}
	roles := map[string]agentView{}
	for _, a := range o.Agents {
		ids = append(ids, a.ID)
		roles[a.Role] = a
	}
	if len(o.Agents) != 5 || ids[0] != as.RootID || ids[4] != as.UserID {
		t.Fatalf("agents %v, want root, three agents, user", ids)
	}
	lead, dev, tester := roles["lead"], roles["developer"], roles["tester"]
	if lead.Parent != as.RootID || dev.Parent != lead.ID || tester.Parent != lead.ID {
		t.Errorf("parents: lead %q, developer %q, tester %q", lead.Parent, dev.Parent, tester.Parent)
	}
	for _, a := range []agentView{lead, dev, tester} {
		if a.Task != task || a.Status != string(as.StatusActive) || a.Queued != 0 || a.Handling != "" {
			t.Errorf("agent %+v, want active on %s, with nothing queued or in hand", a, task)
		}
		want, err := s.Contacts(a.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, c := range a.Contacts {
			got = append(got, c.ID)
		}
		var wantIDs []string
		for _, c := range want {
			wantIDs = append(wantIDs, c.ID)
		}
		if !slices.Equal(got, wantIDs) {
			t.Errorf("contacts of %s: %v, want %v", a.ID, got, wantIDs)
		}
	}
	if !slices.ContainsFunc(dev.Contacts, func(c struct {
		ID     string `json:"id"`
		Source string `json:"source"`
	}) bool {
		return c.ID == tester.ID
	}) {
		t.Errorf("the developer does not know the tester: %+v", dev.Contacts)
	}
	if len(o.Roles) != 3 {
		t.Errorf("roles %+v, want lead, tester, developer", o.Roles)
	}

	tasks := getJSON[[]struct {
		ID, Lead, State string
		Usage           struct {
			ModelCalls int64 `json:"model_calls"`
		}
	}](t, srv.URL+"/api/tasks")
	if len(tasks) != 1 || tasks[0].ID != task || tasks[0].Lead != lead.ID || (tasks[0].State != string(as.TaskDone) && tasks[0].State != string(as.TaskWaiting)) || tasks[0].Usage.ModelCalls == 0 {
		t.Errorf("tasks %+v, want %s done or waiting, led by %s, with model calls", tasks, task, lead.ID)
	}

	d := getJSON[agentView](t, srv.URL+"/api/agents/"+dev.ID)
	if d.ID != dev.ID || d.Brief == nil || d.Brief.Objective == "" || d.Role != "developer" {
		t.Errorf("GET /api/agents/%s: %+v", dev.ID, d)
	}
}

// TestInspect_QueuesAndRequests holds an agent in its first turn, sends it
// more, and checks its queue, what it handles, and the open request with
// its deadline; then lets it go and checks they empty.
func TestInspect_QueuesAndRequests(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	gate := make(chan struct{})
	started := make(chan string, 10)
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		started <- m.ID
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}))
	user, err := s.Actor(as.UserID)
	if err != nil {
		t.Fatal(err)
	}
	user = user.WithTask("t1")
	first, err := user.SendText(ctx, worker.ID(), "first")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != first.ID {
			t.Fatalf("the worker started on %s, not %s", id, first.ID)
		}
	case <-time.After(hangGuard):
		t.Fatal("the worker never started")
	}
	for i := range 2 {
		if _, err := user.SendText(ctx, worker.ID(), fmt.Sprint("more work ", i)); err != nil {
			t.Fatal(err)
		}
	}
	req, err := user.RequestCollaboration(ctx, worker.ID(), as.CollaborationRequestPayload{SubtaskDescription: "review the page"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	w := getJSON[org](t, srv.URL+"/api/org").agent(worker.ID())
	if w.Queued != 3 || w.Handling != first.ID {
		t.Errorf("worker queued %d handling %q, want 3 and %q", w.Queued, w.Handling, first.ID)
	}
	type openRequest struct {
		ID, Task, From, To, Subtask string
		TimeoutSeconds              float64   `json:"timeout_seconds"`
		Opened                      time.Time `json:"opened"`
		Deadline                    time.Time `json:"deadline"`
	}
	reqs := getJSON[[]openRequest](t, srv.URL+"/api/requests")
	if len(reqs) != 1 {
		t.Fatalf("open requests %+v, want %s", reqs, req)
	}
	r := reqs[0]
	if r.ID != req || r.From != as.UserID || r.To != worker.ID() || r.Task != "t1" || r.Subtask != "review the page" ||
		r.TimeoutSeconds != 3600 || !r.Deadline.Equal(r.Opened.Add(time.Hour)) {
		t.Errorf("open request %+v", r)
	}

	close(gate)
	waitFor(t, "the worker to empty its queue", func() bool {
		w := getJSON[org](t, srv.URL+"/api/org").agent(worker.ID())
		return w.Queued == 0 && w.Handling == ""
	})
	if _, err := worker.WithTask("t1").Respond(ctx, req, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	if reqs := getJSON[[]openRequest](t, srv.URL+"/api/requests"); len(reqs) != 0 {
		t.Errorf("open requests after the answer: %+v", reqs)
	}
}

// TestInspect_Artifacts checks the artifact list, an artifact's metadata,
// and its content, served with its media type and sandboxed.
func TestInspect_Artifacts(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	task, id := runQuickstart(t, s)

	list := getJSON[[]struct {
		ID, Ref, Name, Task string
		By                  string `json:"created_by"`
	}](t, srv.URL+"/api/artifacts")
	if len(list) != 1 || list[0].ID != id || list[0].Ref != as.ArtifactRefPrefix+id || list[0].Name != "calculator.html" || list[0].Task != task || list[0].By == "" {
		t.Fatalf("artifacts %+v, want %s", list, id)
	}
	meta := getJSON[struct {
		ID        string `json:"id"`
		MediaType string `json:"media_type"`
		Size      int64  `json:"size"`
	}](t, srv.URL+"/api/artifacts/"+id)
	if meta.ID != id || meta.MediaType != "text/html" || meta.Size != int64(len(demo.Page)) {
		t.Errorf("metadata %+v", meta)
	}
	for _, path := range []string{id, as.ArtifactRefPrefix + id} {
		status, h, body := do(t, "GET", srv.URL+"/api/artifacts/"+path+"/content", "", "")
		if status != http.StatusOK || string(body) != demo.Page {
			t.Fatalf("content of %s: %d, %d bytes", path, status, len(body))
		}
		csp := h.Get("Content-Security-Policy")
		if h.Get("Content-Type") != "text/html" || !strings.HasPrefix(csp, "sandbox allow-scripts;") || strings.Contains(csp, "allow-same-origin") ||
			h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("content headers %v", h)
		}
	}
}

// TestInspect_BadRequests checks that what the inspector cannot answer is
// refused with a 4xx and a reason, and that it stays read-only unless told.
func TestInspect_BadRequests(t *testing.T) {
	s := newSociety(t, as.Config{})
	ro := serve(t, s, inspect.Options{})
	rw := serve(t, s, inspect.Options{AllowSend: true})
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	const js = "application/json"
	for _, c := range []struct {
		name, method, url, contentType, body string
		header                               []string
		status                               int
		code                                 string
	}{
		{"unknown agent", "GET", ro.URL + "/api/agents/agent-404", "", "", nil, 404, "agent_not_found"},
		{"unknown artifact", "GET", ro.URL + "/api/artifacts/a-404", "", "", nil, 404, "artifact_not_found"},
		{"unknown artifact content", "GET", ro.URL + "/api/artifacts/a-404/content", "", "", nil, 404, "artifact_not_found"},
		{"malformed artifact id", "GET", ro.URL + "/api/artifacts/..%2Fetc", "", "", nil, 400, "invalid_artifact_ref"},
		{"malformed artifact id, content", "GET", ro.URL + "/api/artifacts/a%20b/content", "", "", nil, 400, "invalid_artifact_ref"},
		{"unknown endpoint", "GET", ro.URL + "/api/nothing", "", "", nil, 404, "not_found"},
		{"from not a number", "GET", ro.URL + "/api/events?from=x", "", "", nil, 400, "bad_request"},
		{"limit not a number", "GET", ro.URL + "/api/events?limit=-1", "", "", nil, 400, "bad_request"},
		{"stream from not a number", "GET", ro.URL + "/api/events/stream?from=1e3", "", "", nil, 400, "bad_request"},
		{"Last-Event-ID not a number", "GET", ro.URL + "/api/events/stream", "", "", []string{"Last-Event-ID", "abc"}, 400, "bad_request"},
		{"read-only", "POST", ro.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"text":"hi"}`, nil, 403, "read_only"},
		{"not JSON", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", "text/plain", `hi`, nil, 415, "unsupported_media_type"},
		{"bad JSON", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"text":`, nil, 400, "bad_request"},
		{"unknown field", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"txt":"hi"}`, nil, 400, "bad_request"},
		{"two values", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"text":"hi"} {}`, nil, 400, "bad_request"},
		{"no text", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"text":"  "}`, nil, 400, "invalid_argument"},
		{"to user", "POST", rw.URL + "/api/agents/user/messages", js, `{"text":"hi"}`, nil, 400, "invalid_argument"},
		{"to nobody", "POST", rw.URL + "/api/agents/agent-404/messages", js, `{"text":"hi"}`, nil, 404, "agent_not_found"},
		{"too large", "POST", rw.URL + "/api/agents/" + worker.ID() + "/messages", js, `{"text":"` + strings.Repeat("x", 70<<10) + `"}`, nil, 400, "bad_request"},
	} {
		status, h, body := do(t, c.method, c.url, c.contentType, c.body, c.header...)
		var e struct{ Error, Message string }
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || e.Error != c.code || e.Message == "" ||
			!strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s, want %d %s with a reason", c.name, status, body, c.status, c.code)
		}
	}
	// The mux answers a wrong method itself, with the methods allowed.
	for _, c := range []struct{ method, url, allow string }{
		{"DELETE", ro.URL + "/api/org", "GET, HEAD"},
		{"POST", ro.URL + "/api/tasks", "GET, HEAD"},
		{"GET", rw.URL + "/api/agents/" + worker.ID() + "/messages", "POST"},
	} {
		status, h, body := do(t, c.method, c.url, "", "")
		if status != http.StatusMethodNotAllowed || h.Get("Allow") != c.allow || len(body) == 0 {
			t.Errorf("%s %s: %d, Allow %q, %q", c.method, c.url, status, h.Get("Allow"), body)
		}
	}
	// Another origin may not send, even to an inspector that allows it.
	status, _, body := do(t, "POST", rw.URL+"/api/agents/"+worker.ID()+"/messages", js, `{"text":"hi"}`,
		"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site")
	if status != http.StatusForbidden {
		t.Errorf("a cross-origin send: %d %s", status, body)
	}
	// Nothing of the above was sent.
	for e, err := range s.Events(context.Background(), 1) {
		if err == nil && e.Kind == as.EventMessageAccepted && e.Agent == as.UserID {
			t.Errorf("a refused request sent %+v", e.Message)
		}
	}
}

// TestInspect_Send sends a message as user through the API.
func TestInspect_Send(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{AllowSend: true})
	got := make(chan as.Message, 2)
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	}))
	status, _, body := do(t, "POST", srv.URL+"/api/agents/"+worker.ID()+"/messages", "application/json", `{"text":"hello from the page"}`)
	if status != http.StatusOK {
		t.Fatalf("send: %d %s", status, body)
	}
	var sent as.Message
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-got:
			if m.Type == as.TaskAssignment {
				continue // the brief
			}
			if m.ID != sent.ID || m.From != as.UserID || m.TaskID != "t1" || m.Text() != "hello from the page" {
				t.Errorf("the worker got %+v, the API said %+v", m, sent)
			}
			return
		case <-time.After(hangGuard):
			t.Fatal("the message never arrived")
		}
	}
}

// eventsPage mirrors the answer of GET /api/events.
type eventsPage struct {
	Events []as.Event
	Missed *struct{ From, Oldest, Count uint64 }
	Next   uint64
}

// TestInspect_Events pages through the event log, by task, and reports the
// events no longer kept.
func TestInspect_Events(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: 16})
	srv := serve(t, s, inspect.Options{})
	task, _ := runQuickstart(t, s)
	last := s.LastEvent()
	if last <= 16 {
		t.Fatalf("only %d events: the retention drops none", last)
	}
	p := getJSON[eventsPage](t, srv.URL+"/api/events")
	last = p.Next - 1 // events may have come since
	if p.Missed == nil || p.Missed.From != 1 || p.Missed.Oldest != last-15 || p.Missed.Count != last-16 {
		t.Errorf("missed %+v, want from 1, oldest %d", p.Missed, last-15)
	}
	if len(p.Events) != 16 || p.Events[0].Seq != last-15 || p.Next != last+1 {
		t.Errorf("%d events from %d, next %d", len(p.Events), p.Events[0].Seq, p.Next)
	}
	p = getJSON[eventsPage](t, fmt.Sprintf("%s/api/events?from=%d&limit=3", srv.URL, last-5))
	if p.Missed != nil || len(p.Events) != 3 || p.Events[0].Seq != last-5 || p.Next != last-2 {
		t.Errorf("from %d limit 3: %+v", last-5, p)
	}
	p = getJSON[eventsPage](t, fmt.Sprintf("%s/api/events?from=%d&task=nothing", srv.URL, last-5))
	if len(p.Events) != 0 || p.Next <= last {
		t.Errorf("another task's events: %+v", p)
	}
	p = getJSON[eventsPage](t, fmt.Sprintf("%s/api/events?from=%d&task=%s", srv.URL, last-5, task))
	for _, e := range p.Events {
		if e.Task != task {
			t.Errorf("event %d of task %q", e.Seq, e.Task)
		}
	}
}

// sse is one server-sent message.
type sse struct{ event, id, data string }

// readSSE returns the messages of a stream, one at a time, until it ends.
func readSSE(t testing.TB, url string, header ...string) (next func() (sse, bool), stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	next = func() (sse, bool) {
		var m sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.event != "" {
					return m, true
				}
			case strings.HasPrefix(line, "event: "):
				m.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				m.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				m.data = line[len("data: "):]
			default:
				t.Errorf("a line that is not SSE: %q", line)
			}
		}
		if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("reading the stream: %v", err)
		}
		return m, false
	}
	return next, func() { cancel(); resp.Body.Close() }
}

// TestInspect_Stream follows the event stream live, resumes it with
// Last-Event-ID, tells what was missed, and ends it when the society
// closes.
func TestInspect_Stream(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{EventRetention: 64})
	srv := serve(t, s, inspect.Options{})
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	next, stop := readSSE(t, srv.URL+"/api/events/stream?from=1")
	defer stop()
	var seq uint64
	for seq < s.LastEvent() {
		m, ok := next()
		var e as.Event
		if !ok || m.event != "event" || json.Unmarshal([]byte(m.data), &e) != nil || m.id != fmt.Sprint(e.Seq) || e.Seq != seq+1 {
			t.Fatalf("message %+v after event %d", m, seq)
		}
		seq = e.Seq
	}
	// Live: a message sent now arrives on the open stream.
	sent, err := s.SendTextToAgent(ctx, worker.ID(), "live", "")
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, ok := next()
		if !ok {
			t.Fatal("the stream ended")
		}
		var e as.Event
		if err := json.Unmarshal([]byte(m.data), &e); err != nil {
			t.Fatal(err)
		}
		if e.Seq != seq+1 {
			t.Fatalf("event %d after %d", e.Seq, seq)
		}
		seq = e.Seq
		if e.Kind == as.EventMessageAccepted && e.Message.ID == sent.ID {
			break
		}
	}

	// Resumed: Last-Event-ID wins over from.
	next2, stop2 := readSSE(t, srv.URL+"/api/events/stream?from=1", "Last-Event-ID", fmt.Sprint(seq-2))
	if m, ok := next2(); !ok || m.id != fmt.Sprint(seq-1) {
		t.Errorf("resumed after %d: %+v", seq-2, m)
	}
	stop2()

	// Missed: more events than the retention, then a stream from 1.
	for i := range 80 { // each adds an event before SendTextToAgent returns
		if _, err := s.SendTextToAgent(ctx, worker.ID(), fmt.Sprint("more ", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	next3, stop3 := readSSE(t, srv.URL+"/api/events/stream")
	defer stop3()
	m, ok := next3()
	var missed struct{ From, Oldest, Count uint64 }
	if !ok || m.event != "missed" || json.Unmarshal([]byte(m.data), &missed) != nil || missed.From != 1 || missed.Oldest <= 1 || missed.Count != missed.Oldest-1 {
		t.Errorf("first message of a stream from 1 past the retention: %+v", m)
	}
	if m, ok := next3(); !ok || m.event != "event" || m.id != fmt.Sprint(missed.Oldest) {
		t.Errorf("after the missed events: %+v, want event %d", m, missed.Oldest)
	}

	// Closed: the society's end ends the streams, with a word.
	cctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatal(err)
	}
	for _, next := range []func() (sse, bool){next, next3} {
		var last sse
		for m, ok := next(); ok; m, ok = next() {
			last = m
		}
		if last.event != "closed" {
			t.Errorf("the stream ended with %+v, want closed", last)
		}
	}
}

// TestInspect_Page checks that the page, its script and style are served
// with a policy that lets them load only from the handler.
func TestInspect_Page(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	for path, ctype := range map[string]string{"/": "text/html", "/app.js": "text/javascript", "/app.css": "text/css"} {
		status, h, body := do(t, "GET", srv.URL+path, "", "")
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || len(body) < 100 ||
			!strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: %d %v", path, status, h)
		}
	}
	if status, _, _ := do(t, "GET", srv.URL+"/index.html", "", ""); status != http.StatusNotFound {
		t.Errorf("GET /index.html: %d, want 404", status)
	}
}

// TestStream_LastEventIDOverflow: Last-Event-ID 2^64-1 wraps to 0 and the
// stream replays the log from the start.
func TestStream_LastEventIDOverflow(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events/stream", nil)
	req.Header.Set("Last-Event-ID", "18446744073709551615")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID 2^64-1: %d, want 400 (it wraps to a replay from event 1)", resp.StatusCode)
	}
}

// TestStream_StalledClientEndsAfterClose: a client that opens the stream and
// stops reading (its connection stays open) blocks the handler in Write
// for ever; closing the society does not end it, contrary to New's doc
// ("a stream of events ends when its request does or when s is closed").
func TestStream_StalledClientEndsAfterClose(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: 100})
	returned := make(chan struct{})
	h := inspect.New(s, inspect.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/api/events/stream" {
			close(returned)
		}
	}))
	t.Cleanup(srv.Close)
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /api/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client never reads. Fill the socket buffers.
	big := strings.Repeat("x", 60<<10)
	for range 400 {
		if _, err := s.SendTextToAgent(context.Background(), worker.ID(), big, ""); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-returned:
	case <-time.After(hangGuard): // a hang guard
		t.Error("the stream's handler still runs after the society closed")
	}
}

// TestStream_EventsOff: a society that keeps no events (EventRetention
// below zero) is running, yet the stream told the page it had closed, and
// the page gave up. The stream says that events are off, stays open, and
// says closed when the society does close.
func TestStream_EventsOff(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: -1})
	srv := serve(t, s, inspect.Options{})
	next, stop := readSSE(t, srv.URL+"/api/events/stream")
	defer stop()
	m, ok := next()
	var e struct{ Error, Message string }
	if !ok || m.event != "off" || json.Unmarshal([]byte(m.data), &e) != nil || e.Error != "events_off" || !strings.Contains(e.Message, "EventRetention") {
		t.Fatalf("the first message of the stream of a running society without events: %+v (ended: %v), want off, naming EventRetention", m, !ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if m, ok := next(); !ok || m.event != "closed" {
		t.Errorf("after Close: %+v (ended: %v), want closed", m, !ok)
	}
	if m, ok := next(); ok {
		t.Errorf("after closed: %+v, want the end", m)
	}
}

// getHost gets url with Host header host and returns the status and body
// (none for an event stream).
func getHost(t testing.TB, url, host string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, nil // a stream does not end
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// TestInspect_HostOnLoopback: served on loopback, the inspector answered a
// request whose Host is a foreign name, which is what a DNS-rebinding
// page sends: its browser takes the inspector for the page's own site,
// and the page reads the API. It refuses any Host but a loopback name or
// address, or one in Options.AllowedHosts.
func TestInspect_HostOnLoopback(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	allow := serve(t, s, inspect.Options{AllowedHosts: []string{"Inspector.Example"}})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, path := range []string{"/", "/app.js", "/api/org", "/api/events/stream"} {
		status, body := getHost(t, srv.URL+path, "rebind.example:"+port)
		var e struct{ Error, Message string }
		if json.Unmarshal(body, &e) != nil || status != http.StatusForbidden || e.Error != "host_not_allowed" || !strings.Contains(e.Message, "AllowedHosts") {
			t.Errorf("GET %s with Host rebind.example: %d %.200s, want 403 host_not_allowed naming AllowedHosts", path, status, body)
		}
	}
	for _, host := range []string{"localhost", "localhost:" + port, "LocalHost.:" + port, "app.localhost:" + port, "127.0.0.1:" + port, "127.1.2.3", "[::1]:" + port} {
		if status, body := getHost(t, srv.URL+"/api/org", host); status != http.StatusOK {
			t.Errorf("GET /api/org with Host %s: %d %.200s, want 200", host, status, body)
		}
	}
	if status, body := getHost(t, allow.URL+"/api/org", "inspector.example:"+port); status != http.StatusOK {
		t.Errorf("GET /api/org with an allowed Host: %d %.200s, want 200", status, body)
	}
	if status, _ := getHost(t, allow.URL+"/api/org", "rebind.example"); status != http.StatusForbidden {
		t.Errorf("GET /api/org with a Host not allowed, on an inspector that allows another: %d, want 403", status)
	}

	// Served beyond loopback, the host authenticates: any Host is answered.
	// So is a request without Host (HTTP/1.0), which no browser sends.
	h := inspect.New(s, inspect.Options{})
	for _, c := range []struct{ local, host string }{{"192.0.2.1", "rebind.example"}, {"127.0.0.1", ""}} {
		req := httptest.NewRequest("GET", "/api/org", nil)
		req.Host = c.host
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(c.local), Port: 80}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Errorf("served on %s, GET /api/org with Host %q: %d %.200s, want 200", c.local, c.host, w.Code, w.Body)
		}
	}
}

// openRequestView mirrors an open request of GET /api/requests.
type openRequestView struct {
	ID, From, To string
}

// TestDerived_MissedEventsForgetWhatTheyEnded: when the inspector was not
// asked for a while and the events it had not read were dropped, what it
// had counted before stayed for ever: the messages delivered and the
// request answered in the dropped events. What the inspector counted
// before events it missed is forgotten, as the package doc says: events
// older than the retention are not counted.
func TestDerived_MissedEventsForgetWhatTheyEnded(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{EventRetention: 16})
	srv := serve(t, s, inspect.Options{})
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the society's Close
	started, handled := make(chan struct{}, 10), make(chan struct{}, 10)
	worker := spawn(t, s, "t1", "worker", as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, m as.Message) error {
		if m.Type == as.TaskAssignment {
			return nil
		}
		started <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		handled <- struct{}{}
		return nil
	}))
	other := spawn(t, s, "t2", "other", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil })) // root has one child a task
	user, err := s.Actor(as.UserID)
	if err != nil {
		t.Fatal(err)
	}
	user = user.WithTask("t1")
	for i := range 3 {
		if _, err := user.SendText(ctx, worker.ID(), fmt.Sprint("work ", i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-started:
	case <-time.After(hangGuard):
		t.Fatal("the worker never started")
	}
	req, err := user.RequestCollaboration(ctx, other.ID(), as.CollaborationRequestPayload{SubtaskDescription: "review"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if w := getJSON[org](t, srv.URL+"/api/org").agent(worker.ID()); w.Queued != 2 || w.Handling == "" {
		t.Fatalf("worker queued %d handling %q, want 2 and one", w.Queued, w.Handling)
	}
	if reqs := getJSON[[]openRequestView](t, srv.URL+"/api/requests"); len(reqs) != 1 || reqs[0].ID != req {
		t.Fatalf("open requests %+v, want %s", reqs, req)
	}

	// The worker handles its queue and the request is answered, while
	// nobody asks the inspector; then more events than it keeps.
	release()
	if _, err := other.WithTask("t1").Respond(ctx, req, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-handled:
		case <-time.After(hangGuard):
			t.Fatal("the worker never handled its queue")
		}
	}
	for mark := s.LastEvent(); s.LastEvent() < mark+40; {
		if _, err := user.SendText(ctx, other.ID(), "more"); err != nil {
			t.Fatal(err)
		}
	}

	if w := getJSON[org](t, srv.URL+"/api/org").agent(worker.ID()); w.Queued != 0 || w.Handling != "" {
		t.Errorf("worker queued %d handling %q after it handled everything, want 0 and none", w.Queued, w.Handling)
	}
	if reqs := getJSON[[]openRequestView](t, srv.URL+"/api/requests"); len(reqs) != 0 {
		t.Errorf("open requests %+v after the answer, want none", reqs)
	}
}

// TestDerived_RequestOfATerminatedAgent: a request whose requester was
// terminated is never settled (nobody waits for the answer, and the
// society forgets it without an event): the inspector listed it as open
// for ever, and kept it in memory for the society's life.
func TestDerived_RequestOfATerminatedAgent(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	nop := as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil })
	asker := spawn(t, s, "t1", "asker", nop)
	helper := spawn(t, s, "t2", "helper", nop) // root has one child a task
	req, err := asker.WithTask("t1").RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "review"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := getJSON[[]openRequestView](t, srv.URL+"/api/requests"); len(reqs) != 1 || reqs[0].ID != req {
		t.Fatalf("open requests %+v, want %s", reqs, req)
	}
	if err := s.Terminate(ctx, asker.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the asker to end", func() bool {
		a, ok := s.Agent(asker.ID())
		return !ok || a.Status == as.StatusTerminated
	})
	if reqs := getJSON[[]openRequestView](t, srv.URL+"/api/requests"); len(reqs) != 0 {
		t.Errorf("open requests %+v after their requester was terminated, want none", reqs)
	}
}

// TestInspect_ErrorsAreJSON: the package doc says every error is a JSON
// object {"error", "message"}, but the mux's 405 and 404 and the
// cross-origin refusal answered in plain text, which a script reading the
// API cannot decode.
func TestInspect_ErrorsAreJSON(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{AllowSend: true})
	for _, c := range []struct {
		method, path, allow string
		header              []string
		status              int
		code                string
	}{
		{"POST", "/api/tasks", "GET, HEAD", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"DELETE", "/api/agents/root", "GET, HEAD", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"PUT", "/api/agents/root/messages", "GET, HEAD, POST", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST", "/api/nothing", "GET, HEAD", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"GET", "/nothing", "", nil, http.StatusNotFound, "not_found"},
		{"POST", "/api/agents/root/messages", "", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden, "cross_origin"},
	} {
		status, h, body := do(t, c.method, srv.URL+c.path, "application/json", `{"text":"hi"}`, c.header...)
		var e struct{ Error, Message string }
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || e.Error != c.code || e.Message == "" ||
			!strings.HasPrefix(h.Get("Content-Type"), "application/json") || h.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q, %q; want %d %s in JSON, Allow %q", c.method, c.path, status, h.Get("Allow"), body, c.status, c.code, c.allow)
		}
	}
}

// TestStream_LastEventIDAheadOfTheLog: a page left open while its host
// restarted with a fresh society reconnects with the Last-Event-ID of the
// old one, past the new log's end; the stream waited for that event, and
// the page, "live", showed nothing of the new society until its log
// caught up. The stream says that the log was started afresh and goes on
// from its start.
func TestStream_LastEventIDAheadOfTheLog(t *testing.T) {
	s := newSociety(t, as.Config{})
	srv := serve(t, s, inspect.Options{})
	spawn(t, s, "t1", "worker", as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil }))
	last := s.LastEvent()
	next, stop := readSSE(t, srv.URL+"/api/events/stream", "Last-Event-ID", fmt.Sprint(last+1000))
	defer stop()
	m, ok := next()
	var e struct{ Error, Message string }
	if !ok || m.event != "reset" || json.Unmarshal([]byte(m.data), &e) != nil || e.Error != "events_reset" || e.Message == "" {
		t.Fatalf("the stream after Last-Event-ID %d, with %d events logged: %+v, want reset", last+1000, last, m)
	}
	if m, ok := next(); !ok || m.event != "event" || m.id != "1" {
		t.Errorf("after the reset: %+v, want event 1", m)
	}
}
