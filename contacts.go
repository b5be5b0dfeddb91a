package agentsociety

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"agentsociety/internal/index"
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

// ContactRegistry holds every agent's contacts. The first entry for a
// contact wins: adding a contact the owner already has changes nothing, so
// an entry's Source says how the owner first came to know the contact. A
// society's registry loses an entry only when the society forgets the
// contact (see Config.Retention).
//
// A ContactRegistry is safe for concurrent use. The zero value is an empty
// registry ready to use.
type ContactRegistry struct {
	mu     sync.RWMutex
	owners map[string]*index.List[contactEntry]
	// forgotten counts the entries forget removed from other owners'
	// registries: a registry that lost one and gained another has the
	// size it had, and changed.
	forgotten atomic.Uint64
}

// contactEntry is a Contact as the registry keeps it. A society of many
// idle agents holds two per agent, so the contact's role is shared with
// the contact itself, the source is a number, the time is Unix
// nanoseconds, and the rarely set fields live behind a pointer: 48 bytes,
// not 112.
type contactEntry struct {
	id      string
	role    *Role        // the contact's role name and interface spec; never modified
	more    *contactMore // nil unless IntroducedBy, Note, or an unusual Source or AddedAt is set
	addedAt int64        // Unix nanoseconds, unless more.far
	source  uint8        // an index into sources, or 0 when more.source holds it
}

type contactMore struct {
	introducedBy, note string
	source             ContactSource // when contactEntry.source is 0
	far                bool          // AddedAt is addedAt, not contactEntry.addedAt
	addedAt            time.Time
}

// sources are the sources an entry numbers; 0 is "see contactMore".
var sources = [...]ContactSource{1: SourceSystem, SourceParent, SourceChild, SourcePreset, SourceIntroduction, SourceFirstMessage}

// newEntry returns the entry for contact id, whose role (its name and
// interface spec) is role, never modified, with the rest of a Contact.
func newEntry(id string, role *Role, source ContactSource, introducedBy, note string, addedAt time.Time) contactEntry {
	e := contactEntry{id: id, role: role}
	var more contactMore
	if i := slices.Index(sources[1:], source); i >= 0 && source != "" {
		e.source = uint8(i + 1)
	} else {
		more.source = source
	}
	// Unix nanoseconds hold the years 1678 to 2261; the zero time is not
	// among them.
	if addedAt.After(minNano) && addedAt.Before(maxNano) {
		e.addedAt = addedAt.UnixNano()
	} else {
		more.far, more.addedAt = true, addedAt
	}
	more.introducedBy, more.note = introducedBy, note
	if more != (contactMore{}) {
		e.more = &more
	}
	return e
}

// minNano and maxNano bound, a little within, the times Unix nanoseconds
// hold.
var (
	minNano = time.Date(1679, 1, 1, 0, 0, 0, 0, time.UTC)
	maxNano = time.Date(2261, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Key returns the contact's id, by which its owner's list finds it.
func (e contactEntry) Key() string { return e.id }

// from returns how the owner came to know the contact.
func (e *contactEntry) from() ContactSource {
	if e.source == 0 && e.more != nil {
		return e.more.source
	}
	return sources[e.source]
}

func (e *contactEntry) contact() Contact {
	c := Contact{ID: e.id, Role: e.role.Name, InterfaceSpec: e.role.InterfaceSpec.clone(), Source: e.from(), AddedAt: time.Unix(0, e.addedAt)}
	if m := e.more; m != nil {
		c.IntroducedBy, c.Note = m.introducedBy, m.note
		if m.far {
			c.AddedAt = m.addedAt
		}
	}
	return c
}

// NewContactRegistry returns an empty registry.
func NewContactRegistry() *ContactRegistry { return &ContactRegistry{} }

// Add records c in owner's registry and reports whether it was new. If owner
// already knows c.ID, the registry is unchanged and Add returns false.
func (r *ContactRegistry) Add(owner string, c Contact) bool {
	role := &Role{Name: c.Role, InterfaceSpec: c.InterfaceSpec.clone()}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.add(owner, newEntry(c.ID, role, c.Source, c.IntroducedBy, c.Note, c.AddedAt))
}

// addAll adds the society's entries, each sharing its role. Called with
// s.mu held, like knows.
func (r *ContactRegistry) addAll(adds contactAdds) {
	if len(adds.recs) == 0 {
		return // most messages add no contact: take no lock for them
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range adds.recs {
		owner, c := adds.recs[i].Owner, &adds.recs[i].Contact
		r.add(owner, newEntry(c.ID, adds.roles[i], ContactSource(c.Source), c.IntroducedBy, c.Note, c.AddedAt))
	}
}

func (r *ContactRegistry) add(owner string, e contactEntry) bool {
	if r.owners == nil {
		r.owners = make(map[string]*index.List[contactEntry])
	}
	l := r.owners[owner]
	if l == nil {
		l = new(index.List[contactEntry])
		r.owners[owner] = l
	}
	if l.Find(e.id) >= 0 {
		return false
	}
	l.Append(e)
	return true
}

// Get returns owner's entry for id.
func (r *ContactRegistry) Get(owner, id string) (Contact, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if l := r.owners[owner]; l != nil {
		if i := l.Find(id); i >= 0 {
			return l.At(i).contact(), true
		}
	}
	return Contact{}, false
}

// IsKnown reports whether to is in from's registry. It answers the same
// under both contact policies; only the society's use of the answer differs.
func (r *ContactRegistry) IsKnown(from, to string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.knows(from, to)
}

// count returns how many contacts owner has.
func (r *ContactRegistry) count(owner string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if l := r.owners[owner]; l != nil {
		return l.Len()
	}
	return 0
}

// knows is IsKnown for a caller that already excludes writers: the society
// calls it with its own lock held, under which every Add happens.
func (r *ContactRegistry) knows(from, to string) bool {
	l := r.owners[from]
	return l != nil && l.Find(to) >= 0
}

// forget drops owner's registry, and the entries about owner in the
// registries of the agents among others, and returns those it had: the
// society forgot owner (see Config.Retention).
func (r *ContactRegistry) forget(owner string, others []string) (had []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.owners, owner)
	for _, o := range others {
		if l := r.owners[o]; l != nil && l.Delete(owner) {
			had = append(had, o)
			r.forgotten.Add(1)
		}
	}
	return had
}

// ids returns the ids of owner's contacts in the order they were added,
// only those owner knows from source unless source is empty: with
// SourceChild, the children it spawned.
func (r *ContactRegistry) ids(owner string, source ContactSource) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owners[owner]
	if l == nil {
		return nil
	}
	var out []string
	for e := range l.All {
		if source == "" || e.from() == source {
			out = append(out, e.id)
		}
	}
	return out
}

// List returns owner's contacts in the order they were added.
func (r *ContactRegistry) List(owner string) []Contact {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owners[owner]
	if l == nil {
		return nil
	}
	out := make([]Contact, 0, l.Len())
	for e := range l.All {
		out = append(out, e.contact())
	}
	return out
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
	open  map[introKey]introOpen // the request's latest opening
	queue []introStamp           // openings, oldest first; stale when open has another stamp
	stamp uint64
}

// introOpen is an open request's stamp, and the requester's own request it
// serves: itself, unless it was made on the requester's behalf. One
// request, one introduction: answering any of the requests that serve one
// closes them all.
type introOpen struct {
	stamp   uint64
	origin  introKey
	proxied bool // requests were made on behalf of this one
}

type introStamp struct {
	key   introKey
	stamp uint64
}

func (r *introductions) has(k introKey) bool {
	_, ok := r.open[k]
	return ok
}

// add opens k, made on behalf of the open request via (zero for none),
// or opens it again as the newest if it is open. A request made on behalf
// of one that was answered meanwhile opens nothing, and neither does one
// made on behalf of a requester that asked the same agent itself: that
// request stays its own, answered once, and not with the request the
// other serves.
func (r *introductions) add(k, via introKey) {
	e := introOpen{origin: k}
	if via != (introKey{}) {
		o, ok := r.open[via]
		if !ok {
			return
		}
		if old, ok := r.open[k]; ok && old.origin == k {
			return
		}
		e.origin = o.origin
	}
	if r.open == nil {
		r.open = make(map[introKey]introOpen)
	}
	r.stamp++
	e.stamp = r.stamp
	if old, ok := r.open[k]; ok && old.origin == e.origin {
		e.proxied = old.proxied
	}
	r.open[k] = e
	if o, ok := r.open[e.origin]; ok && e.origin != k {
		o.proxied = true
		r.open[e.origin] = o
	}
	r.queue = append(r.queue, introStamp{k, r.stamp})
	for len(r.open) > maxOpenIntroductions {
		old := r.queue[0]
		r.queue = r.queue[1:]
		if r.open[old.key].stamp == old.stamp {
			delete(r.open, old.key)
		}
	}
	if len(r.queue) > 2*len(r.open)+64 { // mostly stale: keep the live openings
		live := make([]introStamp, 0, len(r.open))
		for _, st := range r.queue {
			if r.open[st.key].stamp == st.stamp {
				live = append(live, st)
			}
		}
		r.queue = live
	}
}

// remove closes k, if it is open, with the requests that serve the same
// request of its requester.
func (r *introductions) remove(k introKey) {
	o, ok := r.open[k]
	if !ok {
		return
	}
	delete(r.open, k)
	if o.origin == k && !o.proxied {
		return
	}
	for k2, o2 := range r.open {
		if o2.origin == o.origin {
			delete(r.open, k2)
		}
	}
}

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
