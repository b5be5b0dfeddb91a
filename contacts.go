package agentsociety

import (
	"sync"
	"time"
)

// ContactSource says how an agent came to know a contact.
type ContactSource string

// The sources of contacts.
const (
	SourceSystem       ContactSource = "system"        // root knows user and user knows root from the start
	SourceParent       ContactSource = "parent"        // an agent knows its parent from birth
	SourceChild        ContactSource = "child"         // a parent knows each child it spawned
	SourcePreset       ContactSource = "preset"        // a collaborator named in the agent's brief
	SourceIntroduction ContactSource = "introduction"  // named in an introduction_response to the agent
	SourceFirstMessage ContactSource = "first_message" // the contact wrote to the agent first
)

// Contact is one entry of an agent's contact registry (Requirement 2.7).
type Contact struct {
	ID            string
	Role          string         // the contact's role name
	InterfaceSpec *InterfaceSpec // nil when the contact's role has none
	Source        ContactSource
	IntroducedBy  string // for SourceIntroduction, who introduced the contact
	Note          string // a collaborator's description, or an introducer's advice
	AddedAt       time.Time
}

// ContactPolicy decides whether an agent may message an agent that is not in
// its registry. The seeds disagree (Requirement 2.6 against Property 5), so
// both readings are offered. Under either, every agent may message user and
// user may message every agent.
type ContactPolicy int

const (
	// ContactOpen lets an agent message any existing agent; the registry
	// records who knows whom (Property 5). It is the default.
	ContactOpen ContactPolicy = iota
	// ContactStrict refuses a message to an agent that is not in the sender's
	// registry with [ErrUnknownContact] (Requirement 2.6), and no path
	// widens a registry beyond what the rules grant: a parent presets as
	// collaborators only agents it knows (and user), or the spawn is
	// refused with ErrUnknownContact; an introduction_response adds its
	// target only to an agent that asked for an introduction, or it is
	// refused with [ErrUnsolicitedIntroduction] (see [Actor.Send]).
	//
	// Open introduction requests are kept in memory, up to a few thousand,
	// oldest forgotten first, and not across a restart: after a society is
	// reopened, an agent whose request was still unanswered must ask again.
	ContactStrict
)

// String returns "open" or "strict".
func (p ContactPolicy) String() string {
	if p == ContactStrict {
		return "strict"
	}
	return "open"
}

// ContactRegistry holds every agent's contacts. A registry never forgets
// a contact, and the first entry for a contact wins: adding a contact the
// owner already has changes nothing, so an entry's Source says how the owner
// first came to know the contact.
//
// A ContactRegistry is safe for concurrent use. The zero value is an empty
// registry ready to use.
type ContactRegistry struct {
	mu     sync.RWMutex
	owners map[string]*contactList
}

// contactList keeps entries in the order added. Most agents know a handful
// of contacts, so a slice scan is the fastest lookup and the smallest idle
// footprint; a parent with many children gets an index once it passes
// indexAfter entries.
type contactList struct {
	entries []contactEntry
	index   map[string]int
}

// contactEntry is a Contact as the registry keeps it: a society of many
// idle agents holds two per agent, so the rarely set fields live behind a
// pointer (88 bytes, not 112).
type contactEntry struct {
	id, role string
	spec     *InterfaceSpec
	source   ContactSource
	more     *contactMore // nil unless IntroducedBy or Note is set
	addedAt  time.Time
}

type contactMore struct{ introducedBy, note string }

func newEntry(c Contact) contactEntry {
	e := contactEntry{id: c.ID, role: c.Role, spec: c.InterfaceSpec.clone(), source: c.Source, addedAt: c.AddedAt}
	if c.IntroducedBy != "" || c.Note != "" {
		e.more = &contactMore{c.IntroducedBy, c.Note}
	}
	return e
}

func (e *contactEntry) contact() Contact {
	c := Contact{ID: e.id, Role: e.role, InterfaceSpec: e.spec.clone(), Source: e.source, AddedAt: e.addedAt}
	if e.more != nil {
		c.IntroducedBy, c.Note = e.more.introducedBy, e.more.note
	}
	return c
}

const indexAfter = 16

// NewContactRegistry returns an empty registry.
func NewContactRegistry() *ContactRegistry { return &ContactRegistry{} }

// Add records c in owner's registry and reports whether it was new. If owner
// already knows c.ID, the registry is unchanged and Add returns false.
func (r *ContactRegistry) Add(owner string, c Contact) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owners == nil {
		r.owners = make(map[string]*contactList)
	}
	l := r.owners[owner]
	if l == nil {
		l = &contactList{}
		r.owners[owner] = l
	}
	if l.find(c.ID) >= 0 {
		return false
	}
	l.entries = append(l.entries, newEntry(c))
	if l.index != nil {
		l.index[c.ID] = len(l.entries) - 1
	} else if len(l.entries) > indexAfter {
		l.index = make(map[string]int, len(l.entries))
		for i, e := range l.entries {
			l.index[e.id] = i
		}
	}
	return true
}

// Get returns owner's entry for id.
func (r *ContactRegistry) Get(owner, id string) (Contact, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owners[owner]
	if i := l.find(id); i >= 0 {
		return l.entries[i].contact(), true
	}
	return Contact{}, false
}

// IsKnown reports whether to is in from's registry. It answers the same
// under both contact policies; only the society's use of the answer differs.
func (r *ContactRegistry) IsKnown(from, to string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.owners[from].find(to) >= 0
}

// count returns how many contacts owner has.
func (r *ContactRegistry) count(owner string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if l := r.owners[owner]; l != nil {
		return len(l.entries)
	}
	return 0
}

// knows is IsKnown for a caller that already excludes writers: the society
// calls it with its own lock held, under which every Add happens.
func (r *ContactRegistry) knows(from, to string) bool {
	return r.owners[from].find(to) >= 0
}

// forget drops owner's registry: the society forgot owner (see
// Config.Retention). Entries about owner in other registries stay.
func (r *ContactRegistry) forget(owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.owners, owner)
}

// List returns owner's contacts in the order they were added.
func (r *ContactRegistry) List(owner string) []Contact {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owners[owner]
	if l == nil {
		return nil
	}
	out := make([]Contact, len(l.entries))
	for i := range l.entries {
		out[i] = l.entries[i].contact()
	}
	return out
}

func (l *contactList) find(id string) int {
	if l == nil {
		return -1
	}
	if l.index != nil {
		if i, ok := l.index[id]; ok {
			return i
		}
		return -1
	}
	for i := range l.entries {
		if l.entries[i].id == id {
			return i
		}
	}
	return -1
}

// introKey names an introduction request: requester asked asked to
// introduce it to an agent with some capability, itself or through an agent
// that asked on its behalf (see introductions).
type introKey struct{ requester, asked string }

// maxOpenIntroductions bounds the open introduction requests a society
// remembers; past it, the oldest is forgotten.
const maxOpenIntroductions = 8192

// introductions holds the open introduction requests of a society under
// ContactStrict, so that an introduction adds a contact only to an agent
// that asked for one. An accepted introduction_request from S to Y opens
// (S, Y), and also (A, Y) when it names requester_agent_id A and (A, S) is
// open: S asks on behalf of an agent that asked it. An accepted
// introduction_response closes the requests it answers (see
// Society.prepareIntroduction).
//
// The requests live in memory only: a society reopened on its store starts
// with none, and an agent whose request was open before must ask again.
// At most maxOpenIntroductions are kept, the oldest forgotten first.
// Society.intros is guarded by the society's lock, s.mu.
type introductions struct {
	open  map[introKey]uint64 // the stamp of the request's latest opening
	queue []introStamp        // openings, oldest first; stale when open has another stamp
	stamp uint64
}

type introStamp struct {
	key   introKey
	stamp uint64
}

func (r *introductions) has(k introKey) bool {
	_, ok := r.open[k]
	return ok
}

// add opens k, or opens it again as the newest if it is open.
func (r *introductions) add(k introKey) {
	if r.open == nil {
		r.open = make(map[introKey]uint64)
	}
	r.stamp++
	r.open[k] = r.stamp
	r.queue = append(r.queue, introStamp{k, r.stamp})
	for len(r.open) > maxOpenIntroductions {
		old := r.queue[0]
		r.queue = r.queue[1:]
		if r.open[old.key] == old.stamp {
			delete(r.open, old.key)
		}
	}
	if len(r.queue) > 2*len(r.open)+64 { // mostly stale: keep the live openings
		live := make([]introStamp, 0, len(r.open))
		for _, st := range r.queue {
			if r.open[st.key] == st.stamp {
				live = append(live, st)
			}
		}
		r.queue = live
	}
}

// remove closes k, if it is open.
func (r *introductions) remove(k introKey) { delete(r.open, k) }

// solicited reports whether introducer may add a contact to beneficiary by
// an introduction_response to receiver, and returns the open requests that
// entitle it: beneficiary asked introducer (directly, or through an agent
// that asked on its behalf), or beneficiary asked receiver and receiver
// asked introducer.
func (r *introductions) solicited(beneficiary, receiver, introducer string) ([]introKey, bool) {
	if k := (introKey{beneficiary, introducer}); r.has(k) {
		return []introKey{k}, true
	}
	if beneficiary != receiver {
		k1, k2 := introKey{beneficiary, receiver}, introKey{receiver, introducer}
		if r.has(k1) && r.has(k2) {
			return []introKey{k1, k2}, true
		}
	}
	return nil, false
}
