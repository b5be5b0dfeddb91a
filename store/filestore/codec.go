package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"agentsociety/store"
)

// formatVersion is the version of the snapshots (org.json and the others)
// and the artifact sidecars that this package writes and reads. Version 2
// files begin with a checksum; version 1 files did not.
const formatVersion = 2

// The JSON shapes below are the on-disk format. They are separate from the
// store's record types so that a change to those never changes the format
// silently; field names follow seed 001 where it names them.

type roleJSON struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Prompt        string          `json:"rolePrompt"`
	InterfaceSpec json.RawMessage `json:"interfaceSpec,omitempty"`
	CreatedBy     string          `json:"createdBy"`
	CreatedAt     time.Time       `json:"createdAt,omitzero"`
}

type agentJSON struct {
	ID        string          `json:"id"`
	RoleID    string          `json:"roleId"`
	ParentID  string          `json:"parentAgentId"`
	TaskID    string          `json:"taskId"`
	Brief     json.RawMessage `json:"taskBrief,omitempty"`
	Status    string          `json:"status"`
	CreatedAt time.Time       `json:"createdAt,omitzero"`
	SpawnKey  string          `json:"spawnKey,omitempty"`
}

type contactJSON struct {
	ID            string          `json:"id"`
	Role          string          `json:"role"`
	InterfaceSpec json.RawMessage `json:"interfaceSpec,omitempty"`
	Source        string          `json:"source"`
	IntroducedBy  string          `json:"introducedBy,omitempty"`
	Note          string          `json:"note,omitempty"`
	AddedAt       time.Time       `json:"addedAt,omitzero"`
}

// contactEntryJSON is a contact in a journal record: the contact's fields
// and its owner's id.
type contactEntryJSON struct {
	Owner string `json:"owner"`
	contactJSON
}

type requestJSON struct {
	ID        string    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	TaskID    string    `json:"taskId"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Deadline  time.Time `json:"deadline,omitzero"`
}

type messageJSON struct {
	ID      string          `json:"id"`
	Seq     uint64          `json:"seq"`
	From    string          `json:"from"`
	To      string          `json:"to"`
	TaskID  string          `json:"taskId"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
	SentAt  time.Time       `json:"sentAt,omitzero"`
}

type historyJSON struct {
	AgentID  string            `json:"agentId"`
	Summary  string            `json:"summary,omitempty"`
	Messages []json.RawMessage `json:"messages,omitempty"`
	Dropped  int               `json:"dropped,omitempty"`
}

// historyAppendJSON is a history append in a journal record; a summary
// present replaces the history's.
type historyAppendJSON struct {
	AgentID  string            `json:"agentId"`
	Drop     int               `json:"drop,omitempty"`
	Summary  *string           `json:"summary,omitempty"`
	Messages []json.RawMessage `json:"messages,omitempty"`
}

// removalJSON is a change's removal in a journal record, applied after
// the rest of the record.
type removalJSON struct {
	Agents   []string         `json:"agents,omitempty"`
	Roles    []string         `json:"roles,omitempty"`
	Requests []string         `json:"requests,omitempty"`
	Contacts []contactKeyJSON `json:"contacts,omitempty"`
}

// contactKeyJSON names an entry of a contact registry in a removal.
type contactKeyJSON struct {
	Owner string `json:"owner"`
	ID    string `json:"id"`
}

type stateJSON struct {
	Scope     string          `json:"scope"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value,omitempty"` // absent in a record: the key is deleted
	Writer    string          `json:"writer,omitempty"`
	UpdatedAt time.Time       `json:"updatedAt,omitzero"`
}

// fileHeader begins every snapshot: the format's version and the number of
// the last journal record the snapshot includes.
type fileHeader struct {
	Version    int    `json:"version"`
	JournalSeq uint64 `json:"journalSeq"`
}

func (h *fileHeader) header() *fileHeader { return h }

// snapshot is a snapshot file's contents.
type snapshot interface {
	header() *fileHeader
	// change returns the change that rebuilds the snapshot's part of the
	// state from nothing.
	change() store.Change
}

// orgFile is org.json.
type orgFile struct {
	fileHeader
	Roles             []roleJSON               `json:"roles"`
	Agents            []agentJSON              `json:"agents"`
	ContactRegistries map[string][]contactJSON `json:"contactRegistries"`
	Requests          []requestJSON            `json:"requests"`
}

// pendingFile is pending.json.
type pendingFile struct {
	fileHeader
	Messages []messageJSON `json:"messages"`
}

// statesFile is state.json.
type statesFile struct {
	fileHeader
	Entries []stateJSON `json:"entries"`
}

// historiesFile is histories.json.
type historiesFile struct {
	fileHeader
	Histories []historyJSON `json:"histories"`
}

// A part is a piece of the state with a snapshot file of its own. Parts
// are written one after the other; each file says which journal record it
// includes, and Open replays each record into the parts that lack it.
//
// The store keeps each part in a store.Memory of its own, so that a record
// replayed into one part never touches another: removing an agent removes
// its record and registry (the organisation) and its history, and after a
// crash between two snapshots the one part may need the removal while the
// other already holds a new history, or a new agent, of the same id.
type part struct {
	name   string
	indent bool                                  // whether the file is indented for people to read
	file   func() snapshot                       // an empty file to decode into
	encode func(st *store.State, lsn uint64) any // the file for st at record lsn
	from   func(dst, src *store.State)           // sets dst's fields of this part from src
}

// The parts, by their index in parts.
const (
	orgPart = iota
	pendingPart
	statesPart
	historiesPart
)

var parts = [...]part{
	orgPart:       {orgName, true, func() snapshot { return new(orgFile) }, orgToFile, orgFrom},
	pendingPart:   {pendingName, true, func() snapshot { return new(pendingFile) }, pendingToFile, pendingFrom},
	statesPart:    {statesName, true, func() snapshot { return new(statesFile) }, statesToFile, statesFrom},
	historiesPart: {historiesName, false, func() snapshot { return new(historiesFile) }, historiesToFile, historiesFrom},
}

// partOf sets *pc to the part of c that changes parts[i] and reports
// true, or reports false if c does not change that part: for the
// organisation, roles, agents, contacts, requests and every removal; for
// the histories, histories, appends and the removed agents, whose
// histories go with them. (A switch, not a function in part, so that
// Apply's change stays on its stack; pc is set only for a part c changes,
// since most changes change one.)
func partOf(i int, c, pc *store.Change) bool {
	switch i {
	case orgPart:
		if len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests) == 0 && c.Remove.Empty() {
			return false
		}
		*pc = store.Change{Roles: c.Roles, Agents: c.Agents, Contacts: c.Contacts, Requests: c.Requests, Remove: c.Remove}
	case pendingPart:
		if len(c.Accepted)+len(c.Finished) == 0 {
			return false
		}
		*pc = store.Change{Accepted: c.Accepted, Finished: c.Finished}
	case statesPart:
		if len(c.States) == 0 {
			return false
		}
		*pc = store.Change{States: c.States}
	case historiesPart:
		if len(c.Histories)+len(c.HistoryAppends)+len(c.Remove.Agents) == 0 {
			return false
		}
		*pc = store.Change{Histories: c.Histories, HistoryAppends: c.HistoryAppends, Remove: store.Removal{Agents: c.Remove.Agents}}
	default:
		return false
	}
	return true
}

// orgFrom, pendingFrom, statesFrom and historiesFrom set the fields of
// dst that their part holds from src, the state of that part's Memory.
func orgFrom(dst, src *store.State) {
	dst.Roles, dst.Agents, dst.Contacts, dst.Requests = src.Roles, src.Agents, src.Contacts, src.Requests
}

func pendingFrom(dst, src *store.State)   { dst.Pending = src.Pending }
func statesFrom(dst, src *store.State)    { dst.States = src.States }
func historiesFrom(dst, src *store.State) { dst.Histories = src.Histories }

// changeJSON is a store.Change as the journal keeps it.
type changeJSON struct {
	Roles     []roleJSON         `json:"roles,omitempty"`
	Agents    []agentJSON        `json:"agents,omitempty"`
	Contacts  []contactEntryJSON `json:"contacts,omitempty"`
	Requests  []requestJSON      `json:"requests,omitempty"`
	Accepted  []messageJSON      `json:"accepted,omitempty"`
	Finished  []string           `json:"finished,omitempty"`
	States    []stateJSON        `json:"states,omitempty"`
	Histories []historyJSON      `json:"histories,omitempty"`
	// HistoryAppends are applied after Histories, in order.
	HistoryAppends []historyAppendJSON `json:"historyAppends,omitempty"`
	// Remove is applied after the rest; nil when the change removes
	// nothing, and absent from records written before removals were.
	Remove *removalJSON `json:"remove,omitempty"`
}

// empty reports whether j holds no change: it is the journal's marker (see
// appendMarker). A record that only removes is not empty.
func (j *changeJSON) empty() bool {
	return len(j.Roles)+len(j.Agents)+len(j.Contacts)+len(j.Requests)+len(j.Accepted)+len(j.Finished)+len(j.States)+len(j.Histories)+len(j.HistoryAppends) == 0 &&
		j.Remove.empty()
}

// empty reports whether r, which may be nil, removes nothing.
func (r *removalJSON) empty() bool {
	return r == nil || len(r.Agents)+len(r.Roles)+len(r.Requests)+len(r.Contacts) == 0
}

// recordJSON is a journal record's payload.
type recordJSON struct {
	LSN uint64 `json:"lsn"`
	changeJSON
}

// artifactJSON is an artifact's sidecar.
type artifactJSON struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	MediaType string    `json:"mediaType"`
	CreatedBy string    `json:"createdBy"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Bytes and CRC32C describe the content file, so that a torn or
	// altered one is reported rather than returned.
	Bytes  int64  `json:"contentBytes"`
	CRC32C uint32 `json:"contentCRC32C"`
}

// Conversions to the on-disk shapes. They share the caller's JSON
// documents, which are only read.

func roleToJSON(r store.Role) roleJSON {
	return roleJSON{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: r.InterfaceSpec, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

func agentToJSON(a store.Agent) agentJSON {
	return agentJSON{ID: a.ID, RoleID: a.RoleID, ParentID: a.ParentID, TaskID: a.TaskID, Brief: a.Brief, Status: a.Status, CreatedAt: a.CreatedAt, SpawnKey: a.SpawnKey}
}

func contactToJSON(c store.Contact) contactJSON {
	return contactJSON{ID: c.ID, Role: c.Role, InterfaceSpec: c.InterfaceSpec, Source: c.Source, IntroducedBy: c.IntroducedBy, Note: c.Note, AddedAt: c.AddedAt}
}

func requestToJSON(r store.Request) requestJSON {
	return requestJSON{ID: r.ID, From: r.From, To: r.To, TaskID: r.TaskID, Status: r.Status, CreatedAt: r.CreatedAt, Deadline: r.Deadline}
}

func messageToJSON(m store.Message) messageJSON {
	return messageJSON{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: m.Type, Payload: m.Payload, SentAt: m.SentAt}
}

func historyToJSON(h store.History) historyJSON {
	return historyJSON{AgentID: h.AgentID, Summary: h.Summary, Messages: h.Messages, Dropped: h.Dropped}
}

func historyAppendToJSON(a store.HistoryAppend) historyAppendJSON {
	j := historyAppendJSON{AgentID: a.AgentID, Drop: a.Drop, Messages: a.Messages}
	if a.SetSummary {
		j.Summary = &a.Summary
	}
	return j
}

func stateToJSON(e store.StateEntry) stateJSON {
	return stateJSON{Scope: e.Scope, Key: e.Key, Value: e.Value, Writer: e.Writer, UpdatedAt: e.UpdatedAt}
}

func historyFromJSON(h historyJSON) store.History {
	return store.History{AgentID: h.AgentID, Summary: h.Summary, Messages: h.Messages, Dropped: h.Dropped}
}

func historyAppendFromJSON(j historyAppendJSON) store.HistoryAppend {
	a := store.HistoryAppend{AgentID: j.AgentID, Drop: j.Drop, Messages: j.Messages}
	if j.Summary != nil {
		a.SetSummary, a.Summary = true, *j.Summary
	}
	return a
}

func stateFromJSON(e stateJSON) store.StateEntry {
	return store.StateEntry{Scope: e.Scope, Key: e.Key, Value: e.Value, Writer: e.Writer, UpdatedAt: e.UpdatedAt}
}

func roleFromJSON(r roleJSON) store.Role {
	return store.Role{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: r.InterfaceSpec, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

func agentFromJSON(a agentJSON) store.Agent {
	return store.Agent{ID: a.ID, RoleID: a.RoleID, ParentID: a.ParentID, TaskID: a.TaskID, Brief: a.Brief, Status: a.Status, CreatedAt: a.CreatedAt, SpawnKey: a.SpawnKey}
}

func contactFromJSON(c contactJSON) store.Contact {
	return store.Contact{ID: c.ID, Role: c.Role, InterfaceSpec: c.InterfaceSpec, Source: c.Source, IntroducedBy: c.IntroducedBy, Note: c.Note, AddedAt: c.AddedAt}
}

func requestFromJSON(r requestJSON) store.Request {
	return store.Request{ID: r.ID, From: r.From, To: r.To, TaskID: r.TaskID, Status: r.Status, CreatedAt: r.CreatedAt, Deadline: r.Deadline}
}

func messageFromJSON(m messageJSON) store.Message {
	return store.Message{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: m.Type, Payload: m.Payload, SentAt: m.SentAt}
}

func changeToJSON(c *store.Change) changeJSON {
	var j changeJSON
	if len(c.Roles) > 0 {
		j.Roles = convert(c.Roles, roleToJSON)
	}
	if len(c.Agents) > 0 {
		j.Agents = convert(c.Agents, agentToJSON)
	}
	if len(c.Contacts) > 0 {
		j.Contacts = convert(c.Contacts, func(e store.ContactEntry) contactEntryJSON {
			return contactEntryJSON{Owner: e.Owner, contactJSON: contactToJSON(e.Contact)}
		})
	}
	if len(c.Requests) > 0 {
		j.Requests = convert(c.Requests, requestToJSON)
	}
	if len(c.Accepted) > 0 {
		j.Accepted = convert(c.Accepted, messageToJSON)
	}
	j.Finished = c.Finished
	if len(c.States) > 0 {
		j.States = convert(c.States, stateToJSON)
	}
	if len(c.Histories) > 0 {
		j.Histories = convert(c.Histories, historyToJSON)
	}
	if len(c.HistoryAppends) > 0 {
		j.HistoryAppends = convert(c.HistoryAppends, historyAppendToJSON)
	}
	if r := &c.Remove; !r.Empty() {
		j.Remove = &removalJSON{Agents: r.Agents, Roles: r.Roles, Requests: r.Requests}
		if len(r.Contacts) > 0 {
			j.Remove.Contacts = convert(r.Contacts, func(k store.ContactKey) contactKeyJSON { return contactKeyJSON(k) })
		}
	}
	return j
}

// change returns the change a decoded record holds.
func (j *changeJSON) change() store.Change {
	var c store.Change
	if len(j.Roles) > 0 {
		c.Roles = convert(j.Roles, roleFromJSON)
	}
	if len(j.Agents) > 0 {
		c.Agents = convert(j.Agents, agentFromJSON)
	}
	if len(j.Contacts) > 0 {
		c.Contacts = convert(j.Contacts, func(e contactEntryJSON) store.ContactEntry {
			return store.ContactEntry{Owner: e.Owner, Contact: contactFromJSON(e.contactJSON)}
		})
	}
	if len(j.Requests) > 0 {
		c.Requests = convert(j.Requests, requestFromJSON)
	}
	if len(j.Accepted) > 0 {
		c.Accepted = convert(j.Accepted, messageFromJSON)
	}
	c.Finished = j.Finished
	if len(j.States) > 0 {
		c.States = convert(j.States, stateFromJSON)
	}
	if len(j.Histories) > 0 {
		c.Histories = convert(j.Histories, historyFromJSON)
	}
	if len(j.HistoryAppends) > 0 {
		c.HistoryAppends = convert(j.HistoryAppends, historyAppendFromJSON)
	}
	if r := j.Remove; r != nil {
		c.Remove = store.Removal{Agents: r.Agents, Roles: r.Roles, Requests: r.Requests}
		if len(r.Contacts) > 0 {
			c.Remove.Contacts = convert(r.Contacts, func(k contactKeyJSON) store.ContactKey { return store.ContactKey(k) })
		}
	}
	return c
}

func header(lsn uint64) fileHeader { return fileHeader{Version: formatVersion, JournalSeq: lsn} }

func orgToFile(st *store.State, lsn uint64) any {
	f := &orgFile{
		fileHeader:        header(lsn),
		Roles:             convert(st.Roles, roleToJSON),
		Agents:            convert(st.Agents, agentToJSON),
		ContactRegistries: make(map[string][]contactJSON, len(st.Contacts)),
		Requests:          convert(st.Requests, requestToJSON),
	}
	for owner, list := range st.Contacts {
		f.ContactRegistries[owner] = convert(list, contactToJSON)
	}
	return f
}

// change returns the organisation org.json holds as one change.
func (f *orgFile) change() store.Change {
	var c store.Change
	for _, r := range f.Roles {
		c.Roles = append(c.Roles, roleFromJSON(r))
	}
	for _, a := range f.Agents {
		c.Agents = append(c.Agents, agentFromJSON(a))
	}
	for owner, list := range f.ContactRegistries {
		for _, e := range list {
			c.Contacts = append(c.Contacts, store.ContactEntry{Owner: owner, Contact: contactFromJSON(e)})
		}
	}
	for _, r := range f.Requests {
		c.Requests = append(c.Requests, requestFromJSON(r))
	}
	return c
}

func pendingToFile(st *store.State, lsn uint64) any {
	return &pendingFile{fileHeader: header(lsn), Messages: convert(st.Pending, messageToJSON)}
}

func (f *pendingFile) change() store.Change {
	return store.Change{Accepted: convert(f.Messages, messageFromJSON)}
}

func statesToFile(st *store.State, lsn uint64) any {
	return &statesFile{fileHeader: header(lsn), Entries: convert(st.States, stateToJSON)}
}

func (f *statesFile) change() store.Change {
	return store.Change{States: convert(f.Entries, stateFromJSON)}
}

func historiesToFile(st *store.State, lsn uint64) any {
	return &historiesFile{fileHeader: header(lsn), Histories: convert(st.Histories, historyToJSON)}
}

func (f *historiesFile) change() store.Change {
	return store.Change{Histories: convert(f.Histories, historyFromJSON)}
}

// convert maps each element of in through f.
func convert[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// encoder encodes JSON without escaping HTML, so that nested documents are
// stored as given (less white space), and without a trailing newline.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

func getEncoder() *encoder { e := encoders.Get().(*encoder); e.buf.Reset(); return e }

func putEncoder(e *encoder) {
	if e.buf.Cap() > 1<<20 {
		return // don't keep a large snapshot's buffer around
	}
	encoders.Put(e)
}

// encode returns v's JSON, valid until e is used again or put back.
func (e *encoder) encode(v any) ([]byte, error) {
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")), nil
}

// encodeSnapshot returns v, a struct with at least one field, as JSON
// ending in a newline, indented if the file is for people to read, and
// beginning with its checksum (see seal).
func encodeSnapshot(v any, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return seal(buf.Bytes(), indent), nil
}

// normalize returns a copy of c as the store keeps it, or an error if c
// cannot be stored faithfully: nested documents compacted (which checks that
// they are JSON), times with an offset in whole minutes, strings checked to
// be UTF-8, and ids of roles, agents, requests and contact entries checked
// not to be empty, as store.Memory, which holds the state, requires. The
// copy shares nothing with c but the strings.
func normalize(c *store.Change) (store.Change, error) {
	var out store.Change
	if len(c.Roles) > 0 {
		out.Roles = make([]store.Role, len(c.Roles))
		for i, r := range c.Roles {
			if r.ID == "" {
				return store.Change{}, errors.New("filestore: a role with no id")
			}
			if err := checkStrings("role", r.ID, r.ID, r.Name, r.Prompt, r.CreatedBy); err != nil {
				return store.Change{}, err
			}
			var err error
			if r.InterfaceSpec, err = compactJSON(r.InterfaceSpec); err != nil {
				return store.Change{}, fmt.Errorf("filestore: role %q: interface spec: %w", r.ID, err)
			}
			r.CreatedAt = wireTime(r.CreatedAt)
			out.Roles[i] = r
		}
	}
	if len(c.Agents) > 0 {
		out.Agents = make([]store.Agent, len(c.Agents))
		for i, a := range c.Agents {
			if a.ID == "" {
				return store.Change{}, errors.New("filestore: an agent with no id")
			}
			if err := checkStrings("agent", a.ID, a.ID, a.RoleID, a.ParentID, a.TaskID, a.Status, a.SpawnKey); err != nil {
				return store.Change{}, err
			}
			var err error
			if a.Brief, err = compactJSON(a.Brief); err != nil {
				return store.Change{}, fmt.Errorf("filestore: agent %q: brief: %w", a.ID, err)
			}
			a.CreatedAt = wireTime(a.CreatedAt)
			out.Agents[i] = a
		}
	}
	if len(c.Contacts) > 0 {
		out.Contacts = make([]store.ContactEntry, len(c.Contacts))
		for i, e := range c.Contacts {
			k := e.Contact
			if e.Owner == "" || k.ID == "" {
				return store.Change{}, fmt.Errorf("filestore: a contact entry with no owner or no id (%q, %q)", e.Owner, k.ID)
			}
			if err := checkStrings("contact", k.ID, e.Owner, k.ID, k.Role, k.Source, k.IntroducedBy, k.Note); err != nil {
				return store.Change{}, err
			}
			var err error
			if k.InterfaceSpec, err = compactJSON(k.InterfaceSpec); err != nil {
				return store.Change{}, fmt.Errorf("filestore: contact %q of %q: interface spec: %w", k.ID, e.Owner, err)
			}
			k.AddedAt = wireTime(k.AddedAt)
			out.Contacts[i] = store.ContactEntry{Owner: e.Owner, Contact: k}
		}
	}
	if len(c.Requests) > 0 {
		out.Requests = make([]store.Request, len(c.Requests))
		for i, r := range c.Requests {
			if r.ID == "" {
				return store.Change{}, errors.New("filestore: a request with no id")
			}
			if err := checkStrings("request", r.ID, r.ID, r.From, r.To, r.TaskID, r.Status); err != nil {
				return store.Change{}, err
			}
			r.CreatedAt, r.Deadline = wireTime(r.CreatedAt), wireTime(r.Deadline)
			out.Requests[i] = r
		}
	}
	if len(c.Accepted) > 0 {
		out.Accepted = make([]store.Message, len(c.Accepted))
		for i, m := range c.Accepted {
			if err := checkStrings("message", m.ID, m.ID, m.From, m.To, m.TaskID, m.Type); err != nil {
				return store.Change{}, err
			}
			var err error
			if m.Payload, err = compactJSON(m.Payload); err != nil {
				return store.Change{}, fmt.Errorf("filestore: message %q: payload: %w", m.ID, err)
			}
			m.SentAt = wireTime(m.SentAt)
			out.Accepted[i] = m
		}
	}
	if len(c.Finished) > 0 {
		if err := checkStrings("finished message", "", c.Finished...); err != nil {
			return store.Change{}, err
		}
		out.Finished = append([]string(nil), c.Finished...)
	}
	if len(c.States) > 0 {
		out.States = make([]store.StateEntry, len(c.States))
		for i, e := range c.States {
			if err := checkStrings("state entry", e.Scope+" "+e.Key, e.Scope, e.Key, e.Writer); err != nil {
				return store.Change{}, err
			}
			var err error
			if e.Value, err = compactJSON(e.Value); err != nil {
				return store.Change{}, fmt.Errorf("filestore: state entry %q of %q: value: %w", e.Key, e.Scope, err)
			}
			e.UpdatedAt = wireTime(e.UpdatedAt)
			out.States[i] = e
		}
	}
	if len(c.Histories) > 0 {
		out.Histories = make([]store.History, len(c.Histories))
		for i, h := range c.Histories {
			if err := checkStrings("history", h.AgentID, h.AgentID, h.Summary); err != nil {
				return store.Change{}, err
			}
			var err error
			if h.Messages, err = compactMessages(h.Messages); err != nil {
				return store.Change{}, fmt.Errorf("filestore: history of %q: %w", h.AgentID, err)
			}
			out.Histories[i] = h
		}
	}
	if r := &c.Remove; !r.Empty() {
		for _, ids := range [...]struct {
			kind string
			ids  []string
		}{{"removed agent", r.Agents}, {"removed role", r.Roles}, {"removed request", r.Requests}} {
			if err := checkStrings(ids.kind, "", ids.ids...); err != nil {
				return store.Change{}, err
			}
		}
		for _, k := range r.Contacts {
			if err := checkStrings("removed contact", k.ID, k.Owner, k.ID); err != nil {
				return store.Change{}, err
			}
		}
		out.Remove = store.Removal{
			Agents:   slices.Clone(r.Agents),
			Roles:    slices.Clone(r.Roles),
			Requests: slices.Clone(r.Requests),
			Contacts: slices.Clone(r.Contacts),
		}
	}
	if len(c.HistoryAppends) > 0 {
		out.HistoryAppends = make([]store.HistoryAppend, len(c.HistoryAppends))
		for i, a := range c.HistoryAppends {
			if err := checkStrings("history append", a.AgentID, a.AgentID, a.Summary); err != nil {
				return store.Change{}, err
			}
			var err error
			if a.Messages, err = compactMessages(a.Messages); err != nil {
				return store.Change{}, fmt.Errorf("filestore: history append of %q: %w", a.AgentID, err)
			}
			if !a.SetSummary {
				a.Summary = "" // not stored, so not kept
			}
			out.HistoryAppends[i] = a
		}
	}
	return out, nil
}

// compactMessages returns compacted copies of a history's messages. Each
// must be a JSON value: an empty one, which JSON cannot hold in a list, is
// refused.
func compactMessages(msgs []json.RawMessage) ([]json.RawMessage, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		if len(m) == 0 {
			return nil, fmt.Errorf("message %d is empty", i)
		}
		var err error
		if out[i], err = compactJSON(m); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return out, nil
}

// checkStrings reports an error if one of the strings of the record of the
// given kind and id is not valid UTF-8, which JSON could not keep.
func checkStrings(kind, id string, s ...string) error {
	for _, v := range s {
		if !utf8.ValidString(v) {
			return fmt.Errorf("filestore: %s %q: a string is not valid UTF-8: %q", kind, id, v)
		}
	}
	return nil
}

// compactJSON returns a compacted copy of a nested JSON document; empty
// stays nil.
func compactJSON(b json.RawMessage) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(b)))
	if err := json.Compact(buf, b); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// wireTime returns t in a form RFC 3339 keeps exactly: RFC 3339 offsets
// have no seconds, and encoding/json drops them silently, changing the
// instant, so such a time is kept as UTC.
func wireTime(t time.Time) time.Time {
	if _, off := t.Zone(); off%60 != 0 {
		return t.UTC()
	}
	return t
}
