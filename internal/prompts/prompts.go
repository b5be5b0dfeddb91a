// Package prompts holds the society's default prompts and assembles an
// agent's system prompt from them.
//
// The defaults are embedded; a host may override any file by name with its
// own fs.FS (a directory such as data/prompts, through os.DirFS).
package prompts

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"text/template"
)

//go:embed base.txt root.txt runtime.tmpl
var defaults embed.FS

// The file names a host may override.
const (
	BaseFile    = "base.txt"
	RootFile    = "root.txt"
	RuntimeFile = "runtime.tmpl"
)

// Set is a loaded set of prompts. It is immutable and safe for concurrent use.
type Set struct {
	base, root string
	runtime    *template.Template
}

// Load reads the prompts, each from override when it has the file and from
// the embedded defaults otherwise. A nil override means the defaults.
func Load(override fs.FS) (*Set, error) {
	read := func(name string) (string, error) {
		if override != nil {
			b, err := fs.ReadFile(override, name)
			if err == nil {
				return string(b), nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("prompts: reading %s: %w", name, err)
			}
		}
		b, err := defaults.ReadFile(name)
		return string(b), err
	}
	var s Set
	var err error
	if s.base, err = read(BaseFile); err != nil {
		return nil, err
	}
	if s.root, err = read(RootFile); err != nil {
		return nil, err
	}
	rt, err := read(RuntimeFile)
	if err != nil {
		return nil, err
	}
	if s.runtime, err = template.New(RuntimeFile).Option("missingkey=error").Parse(rt); err != nil {
		return nil, fmt.Errorf("prompts: %s: %w", RuntimeFile, err)
	}
	// A template that parses can still fail on every agent (a field Facts
	// does not have): run it once now, so that New reports it rather than
	// every turn.
	sample := Facts{ID: "agent-1", Role: "r", Parent: "root", ReportTo: "user", TaskID: "t", MaxSteps: 1, Assigned: true,
		Contacts:   []Contact{{ID: "root", Role: "root", Source: "parent", IntroducedBy: "x", Note: "n"}},
		Children:   []Children{{Role: "r", Reported: "agent-2", Waiting: "agent-3"}},
		Interfaces: []Interface{{Role: "r", Spec: "{}"}}}
	if _, err := s.System(false, "p", sample); err != nil {
		return nil, err
	}
	return &s, nil
}

// Facts are the runtime facts of an agent that its system prompt carries.
// Nothing in them grows with the organisation faster than a few words per
// agent: an interface is shown once per role, children once per role.
type Facts struct {
	ID, Role, TaskID string
	Parent           string // the parent as "id（role）", "" for root
	ReportTo         string // whom the agent reports its result to: user for a lead, else its parent's id
	MaxSteps         int    // the model calls a turn may make
	Assigned         bool   // the agent's first message is its brief
	Contacts         []Contact
	Children         []Children
	Interfaces       []Interface
}

// Contact is one contact other than a child, as the prompt shows it.
type Contact struct {
	ID, Role, Source, IntroducedBy, Note string
}

// Children are an agent's children on one role: the ids, comma-separated,
// of those that have reported and of those that have not.
type Children struct {
	Role, Reported, Waiting string
}

// Interface is a role's Interface Spec, as one line of JSON.
type Interface struct {
	Role, Spec string
}

// System assembles the system prompt: base, then root.txt for root or the
// role prompt for any other agent, then the runtime facts.
func (s *Set) System(isRoot bool, rolePrompt string, f Facts) (string, error) {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(s.base))
	b.WriteString("\n\n")
	if isRoot {
		b.WriteString(strings.TrimSpace(s.root))
	} else if p := strings.TrimSpace(rolePrompt); p != "" {
		b.WriteString("## 岗位职责\n")
		b.WriteString(p)
	}
	b.WriteString("\n\n")
	if err := s.runtime.Execute(&b, f); err != nil {
		return "", fmt.Errorf("prompts: %s: %w", RuntimeFile, err)
	}
	return strings.TrimSpace(b.String()), nil
}
