// Package show holds what the example programs share to run a society and
// show what it does: the -real flag that picks the model, a writer the
// society's goroutines can share, a trace of every model call, and the
// organisation as a tree.
package show

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"unicode"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/openai"
)

// ModelFlag registers the -real flag on fs and returns the function that,
// once fs is parsed, gives the model a program runs on and whether it is a
// real one.
//
// The model is real, built by openai.New from the environment (see package
// llm/openai), when -real is given, or when -real is not given and
// OPENAI_API_KEY or OPENAI_BASE_URL is set; otherwise, and with -real=false,
// it is a fresh offline model from offline. name says what that model is in
// the flag's usage, as in "the scripted model".
func ModelFlag[M llm.Model](fs *flag.FlagSet, name string, offline func() M) func() (model llm.Model, isReal bool, err error) {
	realFlag := fs.Bool("real", false, "run on a real model through llm/openai (the default when "+
		openai.EnvAPIKey+" or "+openai.EnvBaseURL+" is set; -real=false forces "+name+")")
	return func() (llm.Model, bool, error) {
		isReal := os.Getenv(openai.EnvAPIKey) != "" || os.Getenv(openai.EnvBaseURL) != ""
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "real" {
				isReal = *realFlag
			}
		})
		if !isReal {
			return offline(), false, nil
		}
		m, err := openai.New(openai.Config{})
		if err != nil {
			return nil, true, err
		}
		return m, true, nil
	}
}

// SyncWriter serialises writes from the society's goroutines, and from the
// program's own, to one writer.
type SyncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSyncWriter returns a SyncWriter that writes to w.
func NewSyncWriter(w io.Writer) *SyncWriter { return &SyncWriter{w: w} }

// Write writes p to the underlying writer, one call at a time.
func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Printf formats as fmt.Printf does and writes the result in one Write.
func (s *SyncWriter) Printf(format string, args ...any) {
	fmt.Fprintf(s, format, args...)
}

// Logger returns a logger that writes the society's warnings and errors (a
// model retried, a turn that failed) to w and drops its other records.
func Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Start starts a society on cfg that shows what it does on w: each call to
// cfg.Model traced (see [Traced]) with the agents' role names, the
// society's warnings and errors logged (see [Logger], which replaces
// cfg.Logger), and each message to user as user reads it.
func Start(ctx context.Context, w *SyncWriter, cfg as.Config) (*as.Society, error) {
	var s *as.Society // set before any model call: the trace reads role names from it
	cfg.Model = Traced(w, cfg.Model, func(id string) string { return RoleOf(s, id) })
	cfg.Logger = Logger(w)
	s, err := as.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.OnUserMessage(func(m as.Message) {
		w.Printf("── user receives ──\n%s\n\n", s.Format(m))
	})
	return s, nil
}

// Traced wraps model so that each call is shown on w: the message that
// opened the agent's turn, as the agent reads it, when the call is the
// turn's first; then the tool calls and the text of the reply. roleOf names
// an agent's role (see [RoleOf]). It works the same on any model. Each
// piece is written in one Write, so w must be safe for concurrent use, as a
// [SyncWriter] is.
func Traced(w io.Writer, model llm.Model, roleOf func(id string) string) llm.Model {
	var mu sync.Mutex
	shown := map[string]string{} // per agent, the last message shown: a retried call shows nothing new
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		who := req.Agent
		if role := roleOf(who); role != "" && role != who {
			who += " (" + role + ")"
		}
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleUser {
			key := fmt.Sprint(n, "\x00", req.Messages[n-1].Content)
			mu.Lock()
			fresh := shown[req.Agent] != key
			shown[req.Agent] = key
			mu.Unlock()
			if fresh {
				fmt.Fprintf(w, "── %s receives ──\n%s\n\n", who, req.Messages[n-1].Content)
			}
		}
		resp, err := model.Generate(ctx, req)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, c := range resp.Message.ToolCalls {
			fmt.Fprintf(&b, "   %s calls %s %s\n", req.Agent, c.Name, Clip(string(c.Arguments), 110))
		}
		if t := strings.TrimSpace(resp.Message.Content); t != "" {
			fmt.Fprintf(&b, "   %s thinks: %s\n\n", req.Agent, t)
		}
		io.WriteString(w, b.String())
		return resp, nil
	})
}

// RoleOf returns the role name of agent id in s, or id itself for root and
// user, or "" for an agent s does not have.
func RoleOf(s *as.Society, id string) string {
	a, ok := s.Agent(id)
	if !ok {
		return ""
	}
	if r, ok := s.Role(a.RoleID); ok {
		return r.Name
	}
	return id
}

// Clip shortens s to n runes, marking the cut.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// WriteOrg writes the organisation of s to w as a tree under root: each
// agent with its role name, and the task of each of root's children. Role
// names, which models choose, are made visible (see Visible): a control
// character, a line break or a bidirectional override in one would let a
// model clear the terminal or forge a line of the tree.
func WriteOrg(w io.Writer, s *as.Society) error {
	if _, err := io.WriteString(w, as.RootID+"\n"); err != nil {
		return err
	}
	return WriteTree(w, s, func(a as.Agent) string {
		role, _ := s.Role(a.RoleID)
		line := a.ID + " (" + role.Name + ")"
		if a.ParentID == as.RootID && a.TaskID != "" {
			line += " " + a.TaskID
		}
		return Visible(line)
	})
}

// Visible returns s with each character a terminal would not print as
// itself shown instead: a C0 control character as its control picture
// (␛ for ESC, ␊ for a line feed), any other (DEL, C1 controls, format
// characters, line and paragraph separators) as <U+XXXX>.
func Visible(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case !unicode.IsGraphic(r):
			fmt.Fprintf(&b, "<U+%04X>", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// WriteTree writes the agents of s to w as a tree under root, one line
// each, as label says.
func WriteTree(w io.Writer, s *as.Society, label func(as.Agent) string) error {
	kids := map[string][]as.Agent{}
	for _, a := range s.Agents() {
		kids[a.ParentID] = append(kids[a.ParentID], a)
	}
	var b strings.Builder
	var walk func(id, indent string)
	walk = func(id, indent string) {
		for i, a := range kids[id] {
			branch, next := "├─ ", "│  "
			if i == len(kids[id])-1 {
				branch, next = "└─ ", "   "
			}
			b.WriteString(indent + branch + label(a) + "\n")
			walk(a.ID, indent+next)
		}
	}
	walk(as.RootID, "")
	_, err := io.WriteString(w, b.String())
	return err
}

// Failure reports whether m, a message to user, says that its task cannot
// go on by itself, and if so what it says: a status_report of a turn that
// failed (status "error": a model that cannot be reached, a key it
// refused), of a budget run out, or of a task gone quiet or stalled. A
// program waiting for a task's answer stops waiting on such a message
// rather than until its deadline.
func Failure(m as.Message) (string, bool) {
	if m.Type != as.StatusReport {
		return "", false
	}
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil {
		return "", false
	}
	switch p.Status {
	case string(as.StatusError), as.StatusBudgetExhausted, as.StatusQuiet, as.StatusStalled:
		return fmt.Sprintf("%s reported %s: %s", m.From, p.Status, strings.TrimSpace(m.Text())), true
	}
	return "", false
}
