// Package inspect is a live inspector for a society, in the browser: an
// [http.Handler] a host mounts on its own server.
//
// Its page shows the organisation as a tree (each agent's role, id and
// status, its contacts, its queue, its budget and what it spent), the
// tasks, the messages of a selected task as they flow, the open
// collaboration requests with their timeouts, and the artifacts, which it
// shows in the page: an HTML artifact renders in a sandboxed frame. It
// follows the society's event log (see [agentsociety.Society.Events]) with
// server-sent events, so it needs no reload. The page, its script and its
// style are embedded in the binary; nothing is fetched from elsewhere and
// there is no build step.
//
//	s, err := agentsociety.New(ctx, cfg)
//	if err != nil {
//		return err
//	}
//	defer s.Close(ctx)
//	mux := http.NewServeMux()
//	mux.Handle("/inspect/", http.StripPrefix("/inspect", inspect.New(s, inspect.Options{})))
//	return http.ListenAndServe("127.0.0.1:8080", mux)
//
// # Security
//
// The inspector shows everything the society holds: briefs, messages,
// artifacts. It has no authentication of its own. Serve it on a loopback
// address, or, if you expose it beyond loopback, wrap the handler in your
// own authentication. Loopback alone does not keep out a web page whose
// site name resolves to 127.0.0.1 (DNS rebinding): the browser then takes
// that page for the inspector's own origin. So a request that reaches
// the handler on a loopback address is refused with 403 Forbidden unless
// its Host header names a loopback host ("localhost", a name ending in
// ".localhost", or a loopback address) or one of [Options.AllowedHosts]
// (a request without one, which no browser sends, is answered).
// A request that reaches it on another address is answered whatever its
// Host: that is the host's authentication's to judge.
//
// It is read-only by default. With [Options.AllowSend] the page may also
// send a message as user to any agent. Requests that change something
// are refused when they come from another origin (see
// [http.CrossOriginProtection]) and must carry a JSON body.
//
// Artifact content is served with its media type, X-Content-Type-Options
// nosniff, and a Content-Security-Policy with sandbox: a page an agent
// wrote runs its own script in an opaque origin, and cannot reach the
// inspector's page, its API with the inspector's origin, or the host's
// cookies.
//
// # Endpoints
//
// The page uses a small JSON API, which a host or a script may use too.
// Every error is a JSON object {"error": code, "message": reason} with a
// 4xx or 5xx status.
//
//	GET  /                              the page
//	GET  /api/org                       the organisation: roles, agents (with queue length, contacts), last event
//	GET  /api/agents/{id}               one agent, with its brief, contacts and budget
//	POST /api/agents/{id}/messages      send {"text": ..., "task": ...} as user (Options.AllowSend only)
//	GET  /api/tasks                     the tasks, with their state, usage and budget
//	GET  /api/requests                  the open collaboration requests, with their deadlines
//	GET  /api/artifacts                 the artifacts stored, newest last
//	GET  /api/artifacts/{id}            one artifact's metadata
//	GET  /api/artifacts/{id}/content    its bytes, with its media type, sandboxed
//	GET  /api/events?from=N&task=T&limit=L  kept events from N on, as a JSON array
//	GET  /api/events/stream?from=N      the event log as server-sent events, live
//
// Queue lengths, open requests and the list of artifacts are derived from
// the event log: a society that keeps no events (Config.EventRetention
// below zero) shows none, and the page says that events are off and
// reloads what it shows every few seconds; events older than the
// retention are not counted.
package inspect

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	as "agentsociety"
)

// Options configure the inspector. The zero value is a read-only
// inspector that, reached on a loopback address, answers only to loopback
// host names.
type Options struct {
	// AllowSend lets the page send a message as user to any agent (POST
	// /api/agents/{id}/messages). Without it such a request is refused
	// with 403 Forbidden.
	AllowSend bool

	// AllowedHosts are the host names, besides loopback ones, that the
	// inspector answers to when it is reached on a loopback address: a
	// name a host gave the inspector (in /etc/hosts, or by a proxy on the
	// same machine that passes the Host header on). Names are matched
	// without their port, ignoring case. See the package doc, Security.
	AllowedHosts []string
}

//go:embed page
var page embed.FS

// maxBody bounds the body of a request that sends a message.
const maxBody = 64 << 10

// maxEvents bounds the events one GET /api/events returns.
const maxEvents = 1000

// handler serves the inspector of one society.
type handler struct {
	s    *as.Society
	opts Options
	// derived keeps what the page shows that only the event log tells.
	derived *derived
}

// New returns the inspector of s. The handler serves the page at "/" and
// its API under "/api/"; mount it under a prefix with [http.StripPrefix].
// It is safe for concurrent use, and holds no goroutine of its own: a
// stream of events ends when its request does or when s is closed.
func New(s *as.Society, opts Options) http.Handler {
	h := &handler{s: s, opts: opts, derived: newDerived(s)}
	mux := http.NewServeMux()
	static, _ := fs.Sub(page, "page") // the directory is embedded: it is there
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", pageHeaders(files))
	mux.Handle("GET /app.js", pageHeaders(files))
	mux.Handle("GET /app.css", pageHeaders(files))
	mux.HandleFunc("GET /api/org", h.org)
	mux.HandleFunc("GET /api/agents/{id}", h.agent)
	mux.HandleFunc("POST /api/agents/{id}/messages", h.send)
	mux.HandleFunc("GET /api/agents/{id}/messages", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "messages are sent with POST; the messages of a task are in /api/events?task=")
	})
	mux.HandleFunc("GET /api/tasks", h.tasks)
	mux.HandleFunc("GET /api/requests", h.requests)
	mux.HandleFunc("GET /api/artifacts", h.artifacts)
	mux.HandleFunc("GET /api/artifacts/{id}", h.artifact)
	mux.HandleFunc("GET /api/artifacts/{id}/content", h.content)
	mux.HandleFunc("GET /api/events", h.events)
	mux.HandleFunc("GET /api/events/stream", h.stream)
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no endpoint "+strconv.Quote(r.URL.Path))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross_origin", "a request that changes something must come from the inspector's own page: this one came from another origin")
	}))
	return hostCheck(opts.AllowedHosts, cop.Handler(jsonMuxErrors(mux)))
}

// jsonMuxErrors answers in JSON the requests mux refuses itself, in plain
// text: a path it has no pattern for (404) and a method its patterns for
// the path do not take (405, with Allow).
func jsonMuxErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" || r.RequestURI == "*" {
			mux.ServeHTTP(w, r)
			return
		}
		refusal := &recorder{header: http.Header{}}
		h.ServeHTTP(refusal, r)
		switch refusal.status {
		case http.StatusNotFound:
			writeError(w, http.StatusNotFound, "not_found", "no page or endpoint "+strconv.Quote(r.URL.Path))
		case http.StatusMethodNotAllowed:
			allow := refusal.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not taken by "+strconv.Quote(r.URL.Path)+"; it takes "+allow)
		default: // nothing else comes without a pattern: pass it on as it is
			maps.Copy(w.Header(), refusal.header)
			w.WriteHeader(refusal.status)
			w.Write(refusal.body)
		}
	})
}

// recorder keeps the answer of a handler that the mux answers a request
// with when no pattern matches it.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	r.body = append(r.body, b...)
	return len(b), nil
}

// hostCheck refuses a request that came to a loopback address with a Host
// that names neither a loopback host nor one of allowed: a page whose name
// resolves to 127.0.0.1 (DNS rebinding) would otherwise read the API as
// its own site.
func hostCheck(allowed []string, next http.Handler) http.Handler {
	names := map[string]bool{}
	for _, n := range allowed {
		if h, _, err := net.SplitHostPort(n); err == nil {
			n = h // a name given with its port
		}
		names[normalHost(n)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if !isLoopbackAddr(local) {
			next.ServeHTTP(w, r)
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = normalHost(host)
		if host == "" || isLoopbackHost(host) || names[host] { // no Host: an HTTP/1.0 client, not a browser
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusForbidden, "host_not_allowed", "the inspector is reached on a loopback address and answers only to a loopback Host "+
			"(localhost, 127.0.0.1, [::1]), not to "+strconv.Quote(r.Host)+", which may be a site that resolved its name to 127.0.0.1 (DNS rebinding); "+
			"open it as http://localhost, or, if the name is the host's own, add it to inspect.Options.AllowedHosts")
	})
}

// normalHost returns host name h in lower case, without the brackets of an
// IPv6 address or a final dot.
func normalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return h
}

// isLoopbackHost reports whether host, normalised, names loopback.
func isLoopbackHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// isLoopbackAddr reports whether a, the address a request came to, is a
// loopback address.
func isLoopbackAddr(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	return ok && ip.Unmap().IsLoopback()
}

// pageCSP is the policy of the inspector's own page: its script and style
// come from the handler, and frames show only artifacts the handler
// serves.
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"

// artifactCSP is the policy of an artifact's content: sandboxed in an
// opaque origin, it may run its own inline script and style, and fetch
// nothing.
const artifactCSP = "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; " +
	"style-src 'unsafe-inline'; img-src data:; font-src data:; media-src data:; frame-ancestors 'self'"

// pageHeaders adds the page's security headers.
func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", pageCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

// writeJSON writes v as JSON with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	enc.Encode(v) // a write error means the client went away
}

// apiError is the body of every error answer.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// writeError writes an error answer.
func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(apiError{Error: code, Message: message})
}

// writeSocietyError answers with err, an error of the society, choosing
// the status from its code.
func writeSocietyError(w http.ResponseWriter, err error) {
	var e *as.Error
	if !errors.As(err, &e) {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	status := http.StatusUnprocessableEntity
	switch e.Code {
	case as.ErrAgentNotFound, as.ErrArtifactNotFound:
		status = http.StatusNotFound
	case as.ErrInvalidArgument, as.ErrInvalidArtifactRef, as.ErrInvalidMessageFormat:
		status = http.StatusBadRequest
	case as.ErrAgentTerminated:
		status = http.StatusConflict
	case as.ErrMailboxFull, as.ErrLoopDetected, as.ErrBudgetExhausted:
		status = http.StatusTooManyRequests
	case as.ErrClosed:
		status = http.StatusServiceUnavailable
	case as.ErrStore:
		status = http.StatusInternalServerError
	}
	writeError(w, status, string(e.Code), e.Error())
}

// agentView is an agent as the API shows it.
type agentView struct {
	ID        string     `json:"id"`
	Role      string     `json:"role,omitempty"` // the role's name
	RoleID    string     `json:"role_id,omitempty"`
	Parent    string     `json:"parent,omitempty"`
	Task      string     `json:"task,omitempty"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at,omitzero"`
	Queued    int        `json:"queued"`         // messages accepted for it and not yet delivered
	Handling  string     `json:"handling"`       // the id of the message it is handling, "" when idle
	Contacts  []contact  `json:"contacts"`       // its contact registry
	Usage     *usageView `json:"usage,omitzero"` // its own budget and spending, when it has a budget of its own
}

// contact is one entry of an agent's contact registry.
type contact struct {
	ID           string    `json:"id"`
	Role         string    `json:"role,omitempty"`
	Source       string    `json:"source"`
	IntroducedBy string    `json:"introduced_by,omitempty"`
	Note         string    `json:"note,omitempty"`
	AddedAt      time.Time `json:"added_at,omitzero"`
}

// usageView is what a task or agent spent, and its budget.
type usageView struct {
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	ModelCalls   int64     `json:"model_calls"`
	Spawns       int64     `json:"spawns"`
	Budget       as.Budget `json:"budget"`
}

func viewUsage(u as.Usage) *usageView {
	return &usageView{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, ModelCalls: u.ModelCalls, Spawns: u.Spawns, Budget: u.Budget}
}

// roleView is a role as the API shows it.
type roleView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Prompt    string    `json:"prompt"`
}

// orgView is the answer of GET /api/org.
type orgView struct {
	// LastEvent is the newest event the view reflects: the page follows
	// the stream from the next one.
	LastEvent     uint64      `json:"last_event"`
	AllowSend     bool        `json:"allow_send"`
	ContactPolicy string      `json:"contact_policy"`
	Roles         []roleView  `json:"roles"`
	Agents        []agentView `json:"agents"` // root first, then every agent oldest first; user last
}

// view returns agent a as the API shows it, with roles by id.
func (h *handler) view(a as.Agent, roles map[string]string, q queueState) agentView {
	v := agentView{ID: a.ID, RoleID: a.RoleID, Role: roles[a.RoleID], Parent: a.ParentID, Task: a.TaskID,
		Status: string(a.Status), CreatedAt: a.CreatedAt, Queued: q.queued[a.ID], Handling: q.handling[a.ID], Contacts: []contact{}}
	if v.Role == "" && (a.ID == as.RootID || a.ID == as.UserID) {
		v.Role = a.ID
	}
	cs, _ := h.s.Contacts(a.ID) // a was listed: an error means it is gone since, with no contacts to show
	for _, c := range cs {
		v.Contacts = append(v.Contacts, contact{ID: c.ID, Role: c.Role, Source: string(c.Source), IntroducedBy: c.IntroducedBy, Note: c.Note, AddedAt: c.AddedAt})
	}
	if u, ok := h.s.AgentUsage(a.ID); ok {
		v.Usage = viewUsage(u)
	}
	return v
}

// roleNames returns the society's roles, and their names by id.
func (h *handler) roleNames() ([]roleView, map[string]string) {
	roles := h.s.Roles()
	names := make(map[string]string, len(roles))
	views := make([]roleView, len(roles))
	for i, r := range roles {
		names[r.ID] = r.Name
		views[i] = roleView{ID: r.ID, Name: r.Name, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, Prompt: r.Prompt}
	}
	return views, names
}

func (h *handler) org(w http.ResponseWriter, r *http.Request) {
	q := h.derived.queues(r.Context())
	roles, names := h.roleNames()
	out := orgView{LastEvent: q.last, AllowSend: h.opts.AllowSend, ContactPolicy: h.s.ContactPolicy().String(), Roles: roles}
	if root, ok := h.s.Agent(as.RootID); ok {
		out.Agents = append(out.Agents, h.view(root, names, q))
	}
	for _, a := range h.s.Agents() {
		out.Agents = append(out.Agents, h.view(a, names, q))
	}
	if user, ok := h.s.Agent(as.UserID); ok {
		out.Agents = append(out.Agents, h.view(user, names, q))
	}
	writeJSON(w, out)
}

// agentDetail is the answer of GET /api/agents/{id}.
type agentDetail struct {
	agentView
	Brief *as.TaskBrief `json:"brief,omitempty"`
}

func (h *handler) agent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a, ok := h.s.Agent(id)
	if !ok {
		writeError(w, http.StatusNotFound, string(as.ErrAgentNotFound), "no agent "+strconv.Quote(id))
		return
	}
	_, names := h.roleNames()
	writeJSON(w, agentDetail{agentView: h.view(a, names, h.derived.queues(r.Context())), Brief: a.Brief})
}

// sendBody is the body of POST /api/agents/{id}/messages.
type sendBody struct {
	Text string `json:"text"`
	// Task is the task the message belongs to; "" means the receiver's
	// own task (a message to root without one starts a new task).
	Task string `json:"task,omitempty"`
}

func (h *handler) send(w http.ResponseWriter, r *http.Request) {
	if !h.opts.AllowSend {
		writeError(w, http.StatusForbidden, "read_only", "this inspector is read-only: the host did not set Options.AllowSend")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the message as application/json: {\"text\": ...}")
		return
	}
	var body sendBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "the body is not a message: "+err.Error())
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "bad_request", "the body holds more than one JSON value")
		return
	}
	if strings.TrimSpace(body.Text) == "" {
		writeError(w, http.StatusBadRequest, string(as.ErrInvalidArgument), "the message has no text")
		return
	}
	id := r.PathValue("id")
	if id == as.UserID {
		writeError(w, http.StatusBadRequest, string(as.ErrInvalidArgument), "the inspector sends as user: it cannot send to user")
		return
	}
	if _, ok := h.s.Agent(id); !ok {
		writeError(w, http.StatusNotFound, string(as.ErrAgentNotFound), "no agent "+strconv.Quote(id))
		return
	}
	m, err := h.s.SendTextToAgent(r.Context(), id, body.Text, body.Task)
	if err != nil {
		writeSocietyError(w, err)
		return
	}
	writeJSON(w, m)
}

// taskView is a task as the API shows it.
type taskView struct {
	ID    string     `json:"id"`
	Lead  string     `json:"lead,omitempty"`
	State string     `json:"state"`
	Usage *usageView `json:"usage"`
}

func (h *handler) tasks(w http.ResponseWriter, r *http.Request) {
	out := []taskView{}
	for _, t := range h.s.Tasks() {
		out = append(out, taskView{ID: t.ID, Lead: t.Lead, State: string(t.State), Usage: viewUsage(t.Usage)})
	}
	writeJSON(w, out)
}

func (h *handler) requests(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, h.derived.openRequests(r.Context()))
}

func (h *handler) artifacts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, h.derived.artifactList(r.Context()))
}

// artifactView is an artifact's metadata as the API shows it.
type artifactView struct {
	ID        string    `json:"id"`
	Ref       string    `json:"ref"`
	Name      string    `json:"name"`
	MediaType string    `json:"media_type"`
	CreatedBy string    `json:"created_by"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// readArtifact reads the artifact named by the path, answering the
// request itself when it cannot.
func (h *handler) readArtifact(w http.ResponseWriter, r *http.Request) (as.Artifact, []byte, bool) {
	a, data, err := h.s.GetArtifact(r.Context(), r.PathValue("id"))
	if err != nil {
		writeSocietyError(w, err)
		return as.Artifact{}, nil, false
	}
	return a, data, true
}

func (h *handler) artifact(w http.ResponseWriter, r *http.Request) {
	if a, _, ok := h.readArtifact(w, r); ok {
		writeJSON(w, artifactView{ID: a.ID, Ref: a.Ref(), Name: a.Name, MediaType: a.MediaType, CreatedBy: a.CreatedBy, Size: a.Size, CreatedAt: a.CreatedAt})
	}
}

func (h *handler) content(w http.ResponseWriter, r *http.Request) {
	a, data, ok := h.readArtifact(w, r)
	if !ok {
		return
	}
	mt := a.MediaType
	if _, _, err := mime.ParseMediaType(mt); err != nil {
		mt = "application/octet-stream" // an agent's label: never pass on one that does not parse
	}
	hd := w.Header()
	hd.Set("Content-Type", mt)
	hd.Set("Content-Security-Policy", artifactCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Referrer-Policy", "no-referrer")
	// An artifact never changes.
	hd.Set("Cache-Control", "private, max-age=31536000, immutable")
	// FormatMediaType returns "" for a name it cannot encode.
	if cd := mime.FormatMediaType("inline", map[string]string{"filename": a.Name}); cd != "" {
		hd.Set("Content-Disposition", cd)
	}
	hd.Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// parseSeq parses the sequence number in query parameter name, 0 when it
// is absent.
func parseSeq(r *http.Request, name string) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errors.New(name + " is not a sequence number: " + strconv.Quote(v))
	}
	return n, nil
}

// eventsPage is the answer of GET /api/events.
type eventsPage struct {
	Events []as.Event `json:"events"`
	// Missed is set when events from the start asked for are no longer
	// kept.
	Missed *missed `json:"missed,omitempty"`
	// Next is the sequence number to ask for next.
	Next uint64 `json:"next"`
}

// missed tells that events were no longer kept.
type missed struct {
	From   uint64 `json:"from"`
	Oldest uint64 `json:"oldest"`
	Count  uint64 `json:"count"`
}

func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	from, err := parseSeq(r, "from")
	if err == nil && from == 0 {
		from = 1
	}
	limit := uint64(maxEvents)
	if err == nil {
		var l uint64
		if l, err = parseSeq(r, "limit"); err == nil && l > 0 {
			limit = min(l, maxEvents)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	task := r.URL.Query().Get("task")
	out := eventsPage{Events: []as.Event{}, Next: from}
	for e, err := range h.s.Events(r.Context(), from) {
		if err != nil {
			var me *as.MissedEventsError
			if errors.Is(err, as.ErrEventsOff) {
				break // none to show
			}
			if !errors.As(err, &me) {
				writeSocietyError(w, err)
				return
			}
			out.Missed = &missed{From: me.From, Oldest: me.Oldest, Count: me.Missed()}
			continue
		}
		out.Next = e.Seq + 1
		if task != "" && e.Task != task {
			continue
		}
		out.Events = append(out.Events, e)
		if uint64(len(out.Events)) == limit {
			break
		}
	}
	writeJSON(w, out)
}

// stream serves the event log as server-sent events: each event is an
// "event" message whose id is its sequence number and whose data is the
// event as JSON. Events no longer kept are told in a "missed" message; a
// "closed" message ends the stream when the society closes. A client that
// reconnects with Last-Event-ID goes on after that event; otherwise the
// stream starts at ?from=N, or at the oldest event kept. A society that
// keeps no events is told in an "off" message; the stream then stays open
// until the society closes. A Last-Event-ID past the newest event is from
// a society the host ran before this one: a "reset" message says so, and
// the stream starts from the oldest event kept.
func (h *handler) stream(w http.ResponseWriter, r *http.Request) {
	from, err := parseSeq(r, "from")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err == nil && n == math.MaxUint64 {
			err = strconv.ErrRange // n+1 would wrap to 0: a replay from the start
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "Last-Event-ID is not a sequence number: "+strconv.Quote(last))
			return
		}
		from = n + 1
	}
	// A client that saw an event the log has not numbered yet saw it from
	// another society: the host started afresh, and numbers from 1 again.
	reset := from > h.s.LastEvent()+1 && r.Header.Get("Last-Event-ID") != ""
	if reset {
		from = 1
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sse := &sseWriter{w: w, rc: rc}
	if reset {
		sse.send("reset", "", apiError{Error: "events_reset", Message: "the client saw events up to " + strings.TrimSpace(r.Header.Get("Last-Event-ID")) +
			", which this society has not logged: it is another society than the one the client followed (its host started afresh); the stream goes on from the start"})
	}
	failed, off := false, false
	for e, err := range h.s.WatchEvents(ctx, from) {
		if err != nil {
			var me *as.MissedEventsError
			switch {
			case errors.As(err, &me):
				sse.send("missed", "", missed{From: me.From, Oldest: me.Oldest, Count: me.Missed()})
			case errors.Is(err, as.ErrEventsOff):
				off = true
				sse.send("off", "", apiError{Error: string(as.ErrEventsOff), Message: eventsOff})
			default:
				failed = true
				sse.send("failed", "", apiError{Error: "events", Message: err.Error()})
			}
		} else {
			sse.send("event", strconv.FormatUint(e.Seq, 10), e)
		}
		if sse.err != nil || rc.Flush() != nil {
			return
		}
	}
	if failed || sse.err != nil || ctx.Err() != nil {
		return // not closed: the client reconnects, or went away
	}
	if off { // the stream stays open, to say when the society closes
		select {
		case <-h.s.Done():
		case <-ctx.Done():
			return
		}
	}
	sse.send("closed", "", apiError{Error: string(as.ErrClosed), Message: "the society closed"})
	rc.Flush()
}

// eventsOff tells the page why nothing will come.
const eventsOff = "the society keeps no events (its Config.EventRetention is below zero): " +
	"the inspector cannot follow it live, and shows no queues, open requests or artifacts; " +
	"the page reloads the organisation and the tasks every few seconds instead"

// sseWriteTimeout bounds the writing of one message: a client that stops
// reading and keeps its connection open would hold the handler for ever,
// past the society's Close.
const sseWriteTimeout = 5 * time.Second

// sseWriter writes server-sent events, keeping the first write error.
type sseWriter struct {
	w   io.Writer
	rc  *http.ResponseController // sets each write's deadline, if not nil
	buf []byte
	err error
}

// send writes one message of type event with id (if not "") and v as JSON
// data. JSON has no raw newline, so the data is one line.
func (s *sseWriter) send(event, id string, v any) {
	if s.err != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(apiError{Error: "encoding", Message: err.Error()})
	}
	s.buf = append(s.buf[:0], "event: "...)
	s.buf = append(s.buf, event...)
	if id != "" {
		s.buf = append(s.buf, "\nid: "...)
		s.buf = append(s.buf, id...)
	}
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	if s.rc != nil {
		s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)) // a server that cannot: no bound
	}
	_, s.err = s.w.Write(s.buf)
}
