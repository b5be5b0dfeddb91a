package natsstore

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"agentsociety/store"
)

// Key prefixes, one per kind of record; see the package documentation.
const (
	prefixRole     = "r."
	prefixAgent    = "a."
	prefixContact  = "c."
	prefixRequest  = "q."
	prefixPending  = "m."
	prefixState    = "s."
	prefixHead     = "h."
	prefixHistMsg  = "hm."
	prefixArtifact = "x."
)

// tok encodes an id as one token of a key: unpadded base64url, whose
// alphabet KV keys allow, or "=" for the empty string, which base64 never
// produces.
func tok(s string) string {
	if s == "" {
		return "="
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// untok decodes a token made by tok.
func untok(t string) (string, error) {
	if t == "=" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(t)
	return string(b), err
}

func roleKey(id string) string           { return prefixRole + tok(id) }
func agentKey(id string) string          { return prefixAgent + tok(id) }
func contactKey(owner, id string) string { return prefixContact + tok(owner) + "." + tok(id) }
func requestKey(id string) string        { return prefixRequest + tok(id) }
func pendingKey(id string) string        { return prefixPending + tok(id) }
func stateKey(scope, key string) string  { return prefixState + tok(scope) + "." + tok(key) }
func headKey(agent string) string        { return prefixHead + tok(agent) }
func histMsgKey(agent string, n uint64) string {
	return prefixHistMsg + tok(agent) + "." + strconv.FormatUint(n, 10)
}
func artifactKey(id string) string { return prefixArtifact + tok(id) }

// ownerTok returns the token of the owner in a contact's key.
func ownerTok(key string) string {
	rest := strings.TrimPrefix(key, prefixContact)
	owner, _, _ := strings.Cut(rest, ".")
	return owner
}

// parseHistMsgKey returns the agent and index of a history message's key.
func parseHistMsgKey(key string) (agent string, n uint64, err error) {
	rest := strings.TrimPrefix(key, prefixHistMsg)
	t, num, ok := strings.Cut(rest, ".")
	if !ok {
		return "", 0, fmt.Errorf("malformed history key %q", key)
	}
	if agent, err = untok(t); err != nil {
		return "", 0, fmt.Errorf("malformed history key %q: %w", key, err)
	}
	if n, err = strconv.ParseUint(num, 10, 64); err != nil {
		return "", 0, fmt.Errorf("malformed history key %q: %w", key, err)
	}
	return agent, n, nil
}

// The values. Roles, agents, contacts and requests list in the order they
// were first applied: First is the revision at which the record was
// created, written when a record replaces an earlier one; a record written
// for the first time leaves it out, for its own revision is its place.

type roleRec struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Prompt        string          `json:"rolePrompt,omitempty"`
	InterfaceSpec json.RawMessage `json:"interfaceSpec,omitempty"`
	CreatedBy     string          `json:"createdBy"`
	CreatedAt     time.Time       `json:"createdAt"`
	First         uint64          `json:"first,omitempty"`
}

type agentRec struct {
	ID        string          `json:"id"`
	RoleID    string          `json:"roleId"`
	ParentID  string          `json:"parentAgentId"`
	TaskID    string          `json:"taskId,omitempty"`
	Brief     json.RawMessage `json:"taskBrief,omitempty"`
	Status    string          `json:"status"`
	CreatedAt time.Time       `json:"createdAt"`
	SpawnKey  string          `json:"spawnKey,omitempty"`
	First     uint64          `json:"first,omitempty"`
}

type contactRec struct {
	Owner         string          `json:"owner"`
	ID            string          `json:"id"`
	Role          string          `json:"role"`
	InterfaceSpec json.RawMessage `json:"interfaceSpec,omitempty"`
	Source        string          `json:"source"`
	IntroducedBy  string          `json:"introducedBy,omitempty"`
	Note          string          `json:"note,omitempty"`
	AddedAt       time.Time       `json:"addedAt"`
	First         uint64          `json:"first,omitempty"`
}

type requestRec struct {
	ID        string    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	TaskID    string    `json:"taskId,omitempty"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
	Deadline  time.Time `json:"deadline"`
	First     uint64    `json:"first,omitempty"`
}

type messageRec struct {
	ID      string          `json:"id"`
	Seq     uint64          `json:"seq"`
	From    string          `json:"from"`
	To      string          `json:"to"`
	TaskID  string          `json:"taskId,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
	SentAt  time.Time       `json:"sentAt"`
}

type stateRec struct {
	Scope     string          `json:"scope"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Writer    string          `json:"writer,omitempty"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// headRec is a history's head: its summary and the range of indices
// [Lo, Hi) of the message keys it holds. Indices only grow, so that a key
// is written once: dropping messages moves Lo, appending moves Hi, and
// replacing the history starts it again at the old Hi.
type headRec struct {
	AgentID string `json:"agentId"`
	Summary string `json:"summary,omitempty"`
	Dropped int    `json:"dropped,omitempty"`
	Lo      uint64 `json:"lo"`
	Hi      uint64 `json:"hi"`
}

type artifactRec struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	MediaType string    `json:"mediaType,omitempty"`
	CreatedBy string    `json:"createdBy,omitempty"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt"`
	Object    string    `json:"object"` // the object holding the content
}

// raw returns b, or nil when it is empty: the store keeps no empty
// documents.
func raw(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

func fromRole(r store.Role) roleRec {
	return roleRec{r.ID, r.Name, r.Prompt, raw(r.InterfaceSpec), r.CreatedBy, r.CreatedAt, 0}
}

func (r roleRec) record() store.Role {
	return store.Role{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: r.InterfaceSpec, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

func fromAgent(a store.Agent) agentRec {
	return agentRec{a.ID, a.RoleID, a.ParentID, a.TaskID, raw(a.Brief), a.Status, a.CreatedAt, a.SpawnKey, 0}
}

func (a agentRec) record() store.Agent {
	return store.Agent{ID: a.ID, RoleID: a.RoleID, ParentID: a.ParentID, TaskID: a.TaskID, Brief: a.Brief, Status: a.Status, CreatedAt: a.CreatedAt, SpawnKey: a.SpawnKey}
}

func fromContact(e store.ContactEntry) contactRec {
	c := e.Contact
	return contactRec{e.Owner, c.ID, c.Role, raw(c.InterfaceSpec), c.Source, c.IntroducedBy, c.Note, c.AddedAt, 0}
}

func (c contactRec) record() store.Contact {
	return store.Contact{ID: c.ID, Role: c.Role, InterfaceSpec: c.InterfaceSpec, Source: c.Source, IntroducedBy: c.IntroducedBy, Note: c.Note, AddedAt: c.AddedAt}
}

func fromRequest(r store.Request) requestRec {
	return requestRec{r.ID, r.From, r.To, r.TaskID, r.Status, r.CreatedAt, r.Deadline, 0}
}

func (r requestRec) record() store.Request {
	return store.Request{ID: r.ID, From: r.From, To: r.To, TaskID: r.TaskID, Status: r.Status, CreatedAt: r.CreatedAt, Deadline: r.Deadline}
}

func fromMessage(m store.Message) messageRec {
	return messageRec{m.ID, m.Seq, m.From, m.To, m.TaskID, m.Type, raw(m.Payload), m.SentAt}
}

func (m messageRec) record() store.Message {
	return store.Message{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: m.Type, Payload: m.Payload, SentAt: m.SentAt}
}

func fromState(e store.StateEntry) stateRec {
	return stateRec{e.Scope, e.Key, e.Value, e.Writer, e.UpdatedAt}
}

func (e stateRec) record() store.StateEntry {
	return store.StateEntry{Scope: e.Scope, Key: e.Key, Value: e.Value, Writer: e.Writer, UpdatedAt: e.UpdatedAt}
}

// firstOf returns the First field of an ordered record's value, zero if
// it has none.
func firstOf(data []byte) (uint64, error) {
	var v struct {
		First uint64 `json:"first"`
	}
	err := json.Unmarshal(data, &v)
	return v.First, err
}
