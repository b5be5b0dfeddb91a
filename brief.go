package agentsociety

import (
	"slices"
	"strings"
)

// TaskBrief is what a parent hands a child when it spawns it (Requirement 1):
// enough context that the child does not guess at constraints its parent
// already knew. Its JSON form uses the seed's field names.
//
// A nil Constraints means the field is missing; an empty, non-nil slice means
// the parent said "no constraints" on purpose.
type TaskBrief struct {
	Objective          string   `json:"objective"`
	Constraints        []string `json:"constraints"`
	Inputs             string   `json:"inputs"`
	Outputs            string   `json:"outputs"`
	CompletionCriteria string   `json:"completion_criteria"`

	Collaborators []Collaborator `json:"collaborators,omitempty"`
	References    []string       `json:"references,omitempty"`
	Priority      string         `json:"priority,omitempty"`
}

// Collaborator presets a contact for the child (Requirement 7): the child
// may message it without asking anyone for an introduction.
type Collaborator struct {
	AgentID       string         `json:"agentId"`
	Role          string         `json:"role,omitempty"`        // what the parent calls it
	Description   string         `json:"description,omitempty"` // what to ask it for
	InterfaceSpec *InterfaceSpec `json:"interfaceSpec,omitempty"`
}

// InterfaceSpec describes the service an agent of a role offers, so that
// others can work with it without reading its internals (Requirement 4).
type InterfaceSpec struct {
	Services     string   `json:"services"`
	InputFormat  string   `json:"input_format"`
	OutputFormat string   `json:"output_format"`
	Examples     []string `json:"examples,omitempty"`
}

// Validate reports whether b has every required field. It returns nil or an
// [*Error] with code [ErrInvalidTaskBrief] whose MissingFields lists every
// missing field in the order objective, constraints, inputs, outputs,
// completion_criteria. A string that is empty or only white space counts as
// missing. A nil brief misses all five.
func (b *TaskBrief) Validate() error {
	var missing []string
	if b == nil {
		missing = append(missing, briefRequired[:]...)
	} else {
		if blank(b.Objective) {
			missing = append(missing, "objective")
		}
		if b.Constraints == nil {
			missing = append(missing, "constraints")
		}
		if blank(b.Inputs) {
			missing = append(missing, "inputs")
		}
		if blank(b.Outputs) {
			missing = append(missing, "outputs")
		}
		if blank(b.CompletionCriteria) {
			missing = append(missing, "completion_criteria")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Error{Code: ErrInvalidTaskBrief, Message: "the task brief lacks required fields", MissingFields: missing}
}

// briefRequired lists the required fields of a TaskBrief in the order
// Validate reports them.
var briefRequired = [...]string{"objective", "constraints", "inputs", "outputs", "completion_criteria"}

// clone returns a deep copy, so that a brief the society keeps cannot be
// changed through a caller's slices.
func (b *TaskBrief) clone() *TaskBrief {
	if b == nil {
		return nil
	}
	c := *b
	c.Constraints = cloneStrings(b.Constraints)
	c.References = cloneStrings(b.References)
	if b.Collaborators != nil {
		c.Collaborators = make([]Collaborator, len(b.Collaborators))
		for i, col := range b.Collaborators {
			col.InterfaceSpec = col.InterfaceSpec.clone()
			c.Collaborators[i] = col
		}
	}
	return &c
}

func (s *InterfaceSpec) clone() *InterfaceSpec {
	if s == nil {
		return nil
	}
	c := *s
	c.Examples = cloneStrings(s.Examples)
	return &c
}

// equal reports whether s and t describe the same interface.
func (s *InterfaceSpec) equal(t *InterfaceSpec) bool {
	if s == nil || t == nil {
		return s == t
	}
	return s.Services == t.Services && s.InputFormat == t.InputFormat && s.OutputFormat == t.OutputFormat && slices.Equal(s.Examples, t.Examples)
}

// cloneStrings copies s, keeping nil and empty apart.
func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append(make([]string, 0, len(s)), s...)
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }
