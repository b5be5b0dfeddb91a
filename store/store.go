// Package store defines where a society keeps its state: the organisation
// (roles, agents, contact registries), pending collaboration requests, the
// journal of accepted messages, and artifacts.
//
// A host picks an implementation and passes it to the society; the package
// ships [Memory], an in-memory store. Implementations import only this package
// and the standard library, never the society itself, and prove themselves
// with the conformance suite in store/storetest.
//
// Records here are persistence shapes: nested documents (task briefs,
// interface specs, message payloads) are carried as raw JSON so that a store
// never needs to understand them.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is returned (possibly wrapped) when a record does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrExists is returned (possibly wrapped) when a record that must be new
// already exists, such as an artifact id.
var ErrExists = errors.New("store: already exists")

// Store keeps a society's state.
//
// A Store must be safe for concurrent use. Every method takes a context that
// bounds the call; a cancelled call may or may not have taken effect, except
// for Apply, which is atomic: a failed Apply leaves no trace (but see
// Apply for a change that only finishes messages). An Apply that has sent
// its change to a remote server may wait for the answer past its
// context's end, up to a bound of the store's own, rather than return
// with the change's outcome unknown.
//
// The society calls Load once when it opens and keeps its own view after that,
// so a Store is a write-behind record, not a cache the society reads from on
// every operation. Implementations must copy what they are given and what they
// return: callers may reuse their slices and maps.
//
// The one exception is the raw JSON of the organisation's records:
// Role.InterfaceSpec, Agent.Brief and Contact.InterfaceSpec. Those bytes are
// immutable: a caller never modifies them once it has passed them to Apply,
// nor those it got from Load, and neither does a store. A store may
// therefore keep the very slices it is given and return them from Load, and
// the society keeps the slices it passes and loads, so that each agent's
// brief is held once, however many idle agents there are.
type Store interface {
	// Load returns everything the store holds except artifact contents.
	// An empty store returns a zero State and no error.
	Load(ctx context.Context) (State, error)

	// Apply records one change atomically: either all of it is durable
	// (as durable as the implementation promises) or none of it is. The
	// one exception is a change that does nothing but finish messages:
	// the end of each message's handling is a fact of its own, so a store
	// may record them one by one, and a failed Apply may have recorded
	// some (a message not recorded finished is delivered again).
	// Records with an id already present replace the earlier ones, except
	// contacts, which are keyed by owner and contact id, histories, keyed by
	// agent id, state entries, keyed by scope and key, and messages, which
	// are appended once each: re-applying a message id that is already
	// pending returns an error wrapping ErrExists. Finishing a message id that
	// is not pending is not an error. History appends extend the histories
	// after Histories replaced theirs, in order (see [HistoryAppend]); their
	// cost must follow what they add, not the length of the history.
	Apply(ctx context.Context, c Change) error

	// PutArtifact stores an artifact's metadata and content. The id is chosen
	// by the caller; putting an id that exists returns an error wrapping
	// ErrExists, so that artifacts stay immutable.
	PutArtifact(ctx context.Context, a Artifact, data []byte) error

	// GetArtifact returns an artifact's metadata and content, or an error
	// wrapping ErrNotFound.
	GetArtifact(ctx context.Context, id string) (Artifact, []byte, error)
}

// Volatile is implemented by a Store that can say its contents are lost
// with the process, as [Memory]'s are. A society does not record each
// message it accepts and finishes in a volatile store: no crash can be
// recovered from one, so the records would only cost time on every message.
// It records instead, when it closes, the messages still waiting to be
// handled, so that a society opened again on the same store in the same
// process delivers them. Until then Load lists as pending the messages the
// society was opened with, handled or not, and none it accepted since; a
// society dropped without Close leaves its queue unrecorded. Everything
// else (the organisation, contacts, requests, state, histories) is recorded
// as in any store.
type Volatile interface {
	// Volatile reports whether the store's contents are lost with the
	// process.
	Volatile() bool
}

// EventLog is implemented by a Store that keeps a society's event log, so
// that a durable society keeps its history. A society writes its events
// behind, in batches, in ascending Seq order, and trims the oldest to the
// retention its host set. Events are opaque to the store.
//
// A society does not write events to a [Volatile] store.
type EventLog interface {
	// AppendEvents adds events after those kept. Their Seqs follow one
	// another and come after the last kept one: directly after it, unless
	// the society dropped events before the store had them (when the
	// store was slower than the society, or kept failing), which leaves
	// a gap that readers are told of. The Data of each is one JSON value,
	// which the store may keep without copying (it is not modified).
	AppendEvents(ctx context.Context, events []Event) error
	// ReadEvents returns up to limit events, the oldest first, from the
	// first kept one whose Seq is at least from.
	ReadEvents(ctx context.Context, from uint64, limit int) ([]Event, error)
	// TrimEvents removes events whose Seq is below before. A store may
	// keep some of them a while longer (it may trim in whole segments);
	// it never removes one at or after before, nor the newest event, so
	// that numbering goes on after it.
	TrimEvents(ctx context.Context, before uint64) error
	// EventBounds returns the Seqs of the oldest and the newest events
	// kept, or 0, 0 when there are none.
	EventBounds(ctx context.Context) (first, last uint64, err error)
}

// Event is one recorded event of a society.
type Event struct {
	Seq  uint64
	Data json.RawMessage
}

// State is a snapshot of a store, as returned by [Store.Load].
//
// Roles, Agents and Requests are each in the order their ids were first
// applied: a record that replaces an earlier one with the same id keeps the
// earlier one's place. (The society does not depend on it: it orders agents
// parents first itself.) store/storetest checks every order given here.
type State struct {
	Roles     []Role
	Agents    []Agent
	Contacts  map[string][]Contact // by owner agent id, in the order added
	Requests  []Request
	Pending   []Message // accepted and not finished, in ascending Seq order
	Histories []History
	States    []StateEntry // ordered by Scope, then Key
}

// Change is one atomic update, as passed to [Store.Apply]. Any field may be
// empty.
type Change struct {
	Roles     []Role
	Agents    []Agent
	Contacts  []ContactEntry
	Requests  []Request
	Accepted  []Message    // messages accepted for delivery
	Finished  []string     // ids of messages whose handling ended
	Histories []History    // replace by AgentID
	States    []StateEntry // replace by Scope and Key; an empty Value deletes the key

	// HistoryAppends extend histories by what the agents' turns added,
	// after Histories are replaced, in the order given.
	HistoryAppends []HistoryAppend

	// Remove names records to remove, after the rest of the change is
	// applied.
	Remove Removal
}

// Empty reports whether c changes nothing.
func (c *Change) Empty() bool {
	return len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests)+len(c.Accepted)+len(c.Finished)+len(c.Histories)+len(c.States)+len(c.HistoryAppends) == 0 &&
		c.Remove.Empty()
}

// Removal names records that a society forgot (see the society's
// Config.Retention), so that a store does not grow for the life of the
// society. Removing a record the store does not hold is not an error. A
// record added again after its removal is a new one: Load lists it in the
// place of a record first applied then.
//
// State entries are removed as any change deletes them: by a
// [StateEntry] with an empty Value.
type Removal struct {
	// Agents are agent ids: each agent's record is removed, with the
	// contact registry it owns and its history.
	Agents []string
	// Roles are role ids.
	Roles []string
	// Requests are collaboration request ids.
	Requests []string
	// Contacts are single entries of registries.
	Contacts []ContactKey
}

// Empty reports whether r removes nothing.
func (r *Removal) Empty() bool {
	return len(r.Agents)+len(r.Roles)+len(r.Requests)+len(r.Contacts) == 0
}

// ContactKey names the entry for contact ID in the registry of Owner.
type ContactKey struct {
	Owner string
	ID    string
}

// Role is a role's record.
type Role struct {
	ID            string
	Name          string
	Prompt        string
	InterfaceSpec json.RawMessage // nil when the role has none
	CreatedBy     string
	CreatedAt     time.Time
}

// Agent is an agent's record. The society never stores its built-in
// agents, root and user.
type Agent struct {
	ID        string
	RoleID    string
	ParentID  string
	TaskID    string
	Brief     json.RawMessage
	Status    string
	CreatedAt time.Time
	// SpawnKey names the spawn that made the agent: the message its parent
	// was handling and the spawn's place in that handling. A message handled
	// again after a crash spawns nothing twice.
	SpawnKey string
}

// Contact is one entry of an agent's contact registry.
type Contact struct {
	ID            string
	Role          string
	InterfaceSpec json.RawMessage // nil when unknown
	Source        string
	IntroducedBy  string
	Note          string
	AddedAt       time.Time
}

// ContactEntry adds Contact to the registry of Owner.
type ContactEntry struct {
	Owner   string
	Contact Contact
}

// Request is a collaboration request's record.
type Request struct {
	ID        string
	From      string // the requester
	To        string // the agent asked to answer
	TaskID    string
	Status    string
	CreatedAt time.Time
	Deadline  time.Time // zero when the request has no timeout
}

// Message is an accepted message's record.
type Message struct {
	ID      string
	Seq     uint64 // acceptance order within the society
	From    string
	To      string
	TaskID  string
	Type    string
	Payload json.RawMessage
	SentAt  time.Time
}

// Artifact is an artifact's metadata. Its content is stored beside it.
type Artifact struct {
	ID        string
	Name      string
	MediaType string
	CreatedBy string
	Size      int64
	CreatedAt time.Time
}

// History is a model-driven agent's conversation, kept so that a society
// reopened on the store goes on where it stopped. Each message is one JSON
// value in the society's own encoding, opaque to the store.
//
// A society records a history as it grows, with a [HistoryAppend] per turn;
// a History in a [Change] replaces the whole one.
type History struct {
	AgentID  string
	Summary  string            // what the messages dropped from the front said
	Messages []json.RawMessage // oldest first
	Dropped  int               // how many messages were dropped from the front, in all
}

// HistoryAppend is what one turn changed in a model-driven agent's
// history: the store removes the first Drop messages of the history, then,
// if SetSummary is true, replaces its summary with Summary, then appends
// Messages. An append to an agent without a history starts one.
//
// A store keeps appends at a cost that follows what they add, not the
// length of the history: the society records one every turn.
type HistoryAppend struct {
	AgentID string
	// Drop is the number of the oldest messages removed, because the
	// history outgrew its budget; a Drop larger than the history removes
	// every message, and one below zero none.
	Drop int
	// SetSummary says whether Summary replaces the history's summary;
	// when false the summary is kept and Summary is ignored.
	SetSummary bool
	Summary    string
	// Messages are appended after the messages kept, oldest first; each
	// is one JSON value.
	Messages []json.RawMessage
}

// StateEntry is one key of shared or private state (seed 004): Scope is
// "task:<taskId>" for the state the agents of a task share, or
// "agent:<agentId>" for an agent's own.
type StateEntry struct {
	Scope     string
	Key       string
	Value     json.RawMessage // a JSON value; an empty one in a Change deletes the key
	Writer    string          // the agent that wrote it
	UpdatedAt time.Time
}
