// Package storetest checks that a [store.Store] implementation keeps the
// contract documented in package store.
//
// The suite is the contract's executable form: an implementation that passes
// it can be handed to a society without the society knowing which one it is.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"agentsociety/store"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Run checks the stores made by newStore against the contract of
// [store.Store], one subtest per rule.
//
// Each subtest calls newStore for its own store, which must be empty; a
// store that holds resources should release them with t.Cleanup. Some
// subtests use a store from several goroutines, so run the suite with -race.
// A store that persists to disk is expected to keep times to the nanosecond
// but may change their location, and may return nil for empty JSON and
// content; the suite accepts both.
//
// An implementation calls Run from its own test:
//
//	func TestFileStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := filestore.Open(t.TempDir(), filestore.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.Store)
	}{
		{"EmptyLoad", testEmptyLoad},
		{"EmptyChange", testEmptyChange},
		{"Roles", testRoles},
		{"Agents", testAgents},
		{"Requests", testRequests},
		{"ReplaceWithinChange", testReplaceWithinChange},
		{"Contacts", testContacts},
		{"PendingSeqOrder", testPendingSeqOrder},
		{"FinishedRemoves", testFinishedRemoves},
		{"FinishUnknown", testFinishUnknown},
		{"AcceptedAndFinishedInOneChange", testAcceptedAndFinished},
		{"DuplicatePendingAppliesNothing", testDuplicatePending},
		{"ManyMessagesInOneChange", testManyMessages},
		{"ArtifactRoundTrip", testArtifactRoundTrip},
		{"ArtifactDuplicate", testArtifactDuplicate},
		{"ArtifactMissing", testArtifactMissing},
		{"CopyIn", testCopyIn},
		{"CopyOut", testCopyOut},
		{"CancelledContext", testCancelledContext},
		{"Concurrent", testConcurrent},
		{"EmptyJSON", testEmptyJSON},
		{"Histories", testHistories},
		{"HistoryAppends", testHistoryAppends},
		{"HistoryDrops", testHistoryDrops},
		{"HistorySummary", testHistorySummary},
		{"HistoryAppendsInOneChange", testHistoryAppendsInOneChange},
		{"LongHistory", testLongHistory},
		{"States", testStates},
		{"FarTimes", testFarTimes},
		{"Remove", testRemove},
		{"RemoveThenAddAgain", testRemoveThenAddAgain},
		{"RemoveAfterTheRestOfTheChange", testRemoveAfterTheRest},
		{"RemoveMany", testRemoveMany},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, newStore(t))
		})
	}
}

// opts lets stores that serialise their state pass: nil and empty slices
// and maps are the same, and times compare as instants, not by location or
// monotonic reading.
var opts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmpopts.EquateApproxTime(0),
}

// base has no monotonic reading, so that a store that drops it still
// returns equal times.
var base = time.Now().Round(0)

func at(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

// The fixtures below build fresh slices on every call, so a test can mutate
// what it passed in and still build the value it expects back.

func role(id, name string) store.Role {
	return store.Role{
		ID:            id,
		Name:          name,
		Prompt:        "You are " + name + ".",
		InterfaceSpec: json.RawMessage(`{"accepts":"` + name + `"}`),
		CreatedBy:     "root",
		CreatedAt:     at(1),
	}
}

func agent(id, status string) store.Agent {
	return store.Agent{
		ID:        id,
		RoleID:    "role-" + id,
		ParentID:  "root",
		TaskID:    "task-" + id,
		Brief:     json.RawMessage(`{"goal":"` + status + `"}`),
		Status:    status,
		CreatedAt: at(2),
	}
}

func contact(id, note string) store.Contact {
	return store.Contact{
		ID:            id,
		Role:          "role-" + id,
		InterfaceSpec: json.RawMessage(`{"id":"` + id + `"}`),
		Source:        "introduction",
		IntroducedBy:  "root",
		Note:          note,
		AddedAt:       at(3),
	}
}

func entry(owner, id, note string) store.ContactEntry {
	return store.ContactEntry{Owner: owner, Contact: contact(id, note)}
}

func request(id, status string) store.Request {
	return store.Request{
		ID:        id,
		From:      "agent-a",
		To:        "agent-b",
		TaskID:    "task-" + id,
		Status:    status,
		CreatedAt: at(4),
		Deadline:  at(64),
	}
}

func message(id string, seq uint64) store.Message {
	return store.Message{
		ID:      id,
		Seq:     seq,
		From:    "agent-a",
		To:      "agent-b",
		TaskID:  "task-1",
		Type:    "text",
		Payload: json.RawMessage(fmt.Sprintf(`{"text":"message %s"}`, id)),
		SentAt:  at(5),
	}
}

func artifact(id string, data []byte) store.Artifact {
	return store.Artifact{
		ID:        id,
		Name:      id + ".txt",
		MediaType: "text/plain",
		CreatedBy: "agent-a",
		Size:      int64(len(data)),
		CreatedAt: at(6),
	}
}

func apply(t *testing.T, s store.Store, c store.Change) {
	t.Helper()
	if err := s.Apply(t.Context(), c); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func load(t *testing.T, s store.Store) store.State {
	t.Helper()
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return st
}

func checkState(t *testing.T, s store.Store, want store.State) {
	t.Helper()
	if diff := cmp.Diff(want, load(t, s), opts); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}
}

func checkArtifact(t *testing.T, s store.Store, want store.Artifact, wantData []byte) {
	t.Helper()
	got, data, err := s.GetArtifact(t.Context(), want.ID)
	if err != nil {
		t.Fatalf("GetArtifact(%q): %v", want.ID, err)
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("GetArtifact(%q) metadata mismatch (-want +got):\n%s", want.ID, diff)
	}
	if diff := cmp.Diff(wantData, data, opts); diff != "" {
		t.Errorf("GetArtifact(%q) content mismatch (-want +got):\n%s", want.ID, diff)
	}
}

func testEmptyLoad(t *testing.T, s store.Store) {
	checkState(t, s, store.State{})
}

func testEmptyChange(t *testing.T, s store.Store) {
	apply(t, s, store.Change{})
	checkState(t, s, store.State{})
}

func testRoles(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Roles: []store.Role{role("r1", "writer"), role("r2", "critic")}})
	apply(t, s, store.Change{Roles: []store.Role{role("r3", "editor")}})
	checkState(t, s, store.State{Roles: []store.Role{
		role("r1", "writer"), role("r2", "critic"), role("r3", "editor"),
	}})

	// A replaced record keeps the place of the one it replaces.
	apply(t, s, store.Change{Roles: []store.Role{role("r1", "poet")}})
	checkState(t, s, store.State{Roles: []store.Role{
		role("r1", "poet"), role("r2", "critic"), role("r3", "editor"),
	}})
}

func testAgents(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Agents: []store.Agent{agent("a1", "idle"), agent("a2", "idle")}})
	keyed := agent("a3", "busy")
	keyed.SpawnKey = "msg-1#2"
	apply(t, s, store.Change{Agents: []store.Agent{keyed}})
	apply(t, s, store.Change{Agents: []store.Agent{agent("a2", "done")}})
	checkState(t, s, store.State{Agents: []store.Agent{
		agent("a1", "idle"), agent("a2", "done"), keyed,
	}})
}

func testRequests(t *testing.T, s store.Store) {
	noDeadline := request("q2", "open")
	noDeadline.Deadline = time.Time{}
	apply(t, s, store.Change{Requests: []store.Request{request("q1", "open"), noDeadline}})
	apply(t, s, store.Change{Requests: []store.Request{request("q3", "open")}})
	apply(t, s, store.Change{Requests: []store.Request{request("q1", "answered")}})

	got := load(t, s)
	want := store.State{Requests: []store.Request{request("q1", "answered"), noDeadline, request("q3", "open")}}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}
	if len(got.Requests) == 3 && !got.Requests[1].Deadline.IsZero() {
		t.Errorf("zero Deadline came back as %v", got.Requests[1].Deadline)
	}
}

func testReplaceWithinChange(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Roles:    []store.Role{role("r1", "writer"), role("r2", "critic"), role("r1", "poet")},
		Agents:   []store.Agent{agent("a1", "idle"), agent("a1", "busy")},
		Contacts: []store.ContactEntry{entry("a1", "c1", "first"), entry("a1", "c2", ""), entry("a1", "c1", "second")},
		Requests: []store.Request{request("q1", "open"), request("q1", "answered")},
	})
	checkState(t, s, store.State{
		Roles:    []store.Role{role("r1", "poet"), role("r2", "critic")},
		Agents:   []store.Agent{agent("a1", "busy")},
		Contacts: map[string][]store.Contact{"a1": {contact("c1", "second"), contact("c2", "")}},
		Requests: []store.Request{request("q1", "answered")},
	})
}

func testContacts(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Contacts: []store.ContactEntry{
		entry("a", "c1", "one"), entry("a", "c2", "two"),
		entry("b", "c1", "b's one"), // same contact id, another owner
	}})
	apply(t, s, store.Change{Contacts: []store.ContactEntry{entry("a", "c3", "three")}})
	checkState(t, s, store.State{Contacts: map[string][]store.Contact{
		"a": {contact("c1", "one"), contact("c2", "two"), contact("c3", "three")},
		"b": {contact("c1", "b's one")},
	}})

	// Replacing (a, c1) keeps its place and leaves (b, c1) alone.
	apply(t, s, store.Change{Contacts: []store.ContactEntry{entry("a", "c1", "one again")}})
	checkState(t, s, store.State{Contacts: map[string][]store.Contact{
		"a": {contact("c1", "one again"), contact("c2", "two"), contact("c3", "three")},
		"b": {contact("c1", "b's one")},
	}})
}

func testPendingSeqOrder(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Accepted: []store.Message{message("m5", 5)}})
	apply(t, s, store.Change{Accepted: []store.Message{message("m3", 3), message("m9", 9), message("m1", 1)}})
	apply(t, s, store.Change{Accepted: []store.Message{message("m4", 4)}})
	checkState(t, s, store.State{Pending: []store.Message{
		message("m1", 1), message("m3", 3), message("m4", 4), message("m5", 5), message("m9", 9),
	}})
}

// testManyMessages applies a change with a thousand messages, as a
// society closing on a volatile store writes its whole queue, and one with
// a duplicate far into it, which applies nothing.
func testManyMessages(t *testing.T, s store.Store) {
	const n = 1000
	var msgs []store.Message
	for i := range n {
		msgs = append(msgs, message("m"+strconv.Itoa(i), uint64(i+1)))
	}
	bad := append(slices.Clone(msgs), message("m432", n+1))
	if err := s.Apply(t.Context(), store.Change{Accepted: bad}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Apply with message m432 twice: got error %v, want one wrapping store.ErrExists", err)
	}
	checkState(t, s, store.State{})
	apply(t, s, store.Change{Accepted: msgs})
	checkState(t, s, store.State{Pending: msgs})
}

func testFinishedRemoves(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Accepted: []store.Message{message("m1", 1), message("m2", 2), message("m3", 3)}})
	apply(t, s, store.Change{Finished: []string{"m2"}})
	checkState(t, s, store.State{Pending: []store.Message{message("m1", 1), message("m3", 3)}})

	apply(t, s, store.Change{Finished: []string{"m3", "m1"}})
	checkState(t, s, store.State{})
}

func testFinishUnknown(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Finished: []string{"never-accepted"}})
	checkState(t, s, store.State{})

	apply(t, s, store.Change{Accepted: []store.Message{message("m1", 1), message("m2", 2)}})
	apply(t, s, store.Change{Finished: []string{"m1"}})
	apply(t, s, store.Change{Finished: []string{"m1", "never-accepted"}}) // finished twice
	checkState(t, s, store.State{Pending: []store.Message{message("m2", 2)}})
}

func testAcceptedAndFinished(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Accepted: []store.Message{message("m1", 1), message("m2", 2)},
		Finished: []string{"m1"},
	})
	checkState(t, s, store.State{Pending: []store.Message{message("m2", 2)}})
}

func testDuplicatePending(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Roles:          []store.Role{role("r1", "writer")},
		Agents:         []store.Agent{agent("a1", "idle")},
		Contacts:       []store.ContactEntry{entry("a1", "c1", "one")},
		Requests:       []store.Request{request("q1", "open")},
		Accepted:       []store.Message{message("m1", 1), message("m2", 2)},
		HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("1", "2")}},
	})
	before := load(t, s)

	bad := store.Change{
		Roles:    []store.Role{role("r1", "poet"), role("r2", "critic")},
		Agents:   []store.Agent{agent("a1", "busy"), agent("a2", "idle")},
		Contacts: []store.ContactEntry{entry("a1", "c1", "replaced"), entry("a1", "c2", "new"), entry("a2", "c1", "new owner")},
		Requests: []store.Request{request("q1", "answered"), request("q2", "open")},
		Accepted: []store.Message{message("m3", 3), message("m1", 10)},
		Finished: []string{"m2"},
		HistoryAppends: []store.HistoryAppend{
			{AgentID: "a1", Drop: 1, SetSummary: true, Summary: "s", Messages: msgs("3")},
			{AgentID: "a2", Messages: msgs("1")},
		},
	}
	err := s.Apply(t.Context(), bad)
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("Apply re-accepting pending m1: got error %v, want one wrapping store.ErrExists", err)
	}
	if diff := cmp.Diff(before, load(t, s), opts); diff != "" {
		t.Errorf("failed Apply left a trace (-before +after):\n%s", diff)
	}

	// The failure must not wedge the store: the change without the
	// duplicate goes through.
	bad.Accepted = bad.Accepted[:1]
	apply(t, s, bad)
	checkState(t, s, store.State{
		Roles:    []store.Role{role("r1", "poet"), role("r2", "critic")},
		Agents:   []store.Agent{agent("a1", "busy"), agent("a2", "idle")},
		Contacts: map[string][]store.Contact{"a1": {contact("c1", "replaced"), contact("c2", "new")}, "a2": {contact("c1", "new owner")}},
		Requests: []store.Request{request("q1", "answered"), request("q2", "open")},
		Pending:  []store.Message{message("m1", 1), message("m3", 3)},
		Histories: []store.History{
			{AgentID: "a1", Summary: "s", Messages: msgs("2", "3"), Dropped: 1},
			{AgentID: "a2", Messages: msgs("1")},
		},
	})
}

func testArtifactRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	data := []byte("hello, society")
	if err := s.PutArtifact(ctx, artifact("x1", data), data); err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	if err := s.PutArtifact(ctx, artifact("x2", nil), nil); err != nil {
		t.Fatalf("PutArtifact empty: %v", err)
	}
	checkArtifact(t, s, artifact("x1", data), []byte("hello, society"))
	checkArtifact(t, s, artifact("x2", nil), nil)
	// Artifacts are not part of the society's state.
	checkState(t, s, store.State{})
}

func testArtifactDuplicate(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := []byte("first")
	if err := s.PutArtifact(ctx, artifact("x1", first), first); err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	second := []byte("second version")
	a := artifact("x1", second)
	a.Name = "other.txt"
	err := s.PutArtifact(ctx, a, second)
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutArtifact of existing id: got error %v, want one wrapping store.ErrExists", err)
	}
	checkArtifact(t, s, artifact("x1", first), []byte("first"))
}

func testArtifactMissing(t *testing.T, s store.Store) {
	_, _, err := s.GetArtifact(t.Context(), "missing")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetArtifact of missing id: got error %v, want one wrapping store.ErrNotFound", err)
	}
}

// scribble overwrites b so that a store still sharing it would show it.
func scribble(b []byte) {
	for i := range b {
		b[i] = '#'
	}
}

// testCopyIn and testCopyOut change what was given to Apply and what Load
// returned, and check that the store kept its own. They leave alone the raw
// JSON of roles, agents and contacts, which no one modifies (see
// store.Store), so a store may share it.
func testCopyIn(t *testing.T, s store.Store) {
	c := store.Change{
		Roles:          []store.Role{role("r1", "writer")},
		Agents:         []store.Agent{agent("a1", "idle")},
		Contacts:       []store.ContactEntry{entry("a1", "c1", "one")},
		Requests:       []store.Request{request("q1", "open")},
		Accepted:       []store.Message{message("m1", 1)},
		Histories:      []store.History{{AgentID: "a1", Messages: msgs("1")}},
		HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("2")}},
	}
	apply(t, s, c)
	data := []byte("content")
	if err := s.PutArtifact(t.Context(), artifact("x1", data), data); err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}

	scribble(c.Accepted[0].Payload)
	scribble(c.Histories[0].Messages[0])
	scribble(c.HistoryAppends[0].Messages[0])
	scribble(data)
	c.Roles[0].Name = "changed"
	c.Agents[0].Status = "changed"
	c.Contacts[0].Contact.Note = "changed"
	c.Requests[0].Status = "changed"
	c.Accepted[0].Seq = 99
	c.Histories[0].Messages[0] = msgs("changed")[0]
	c.HistoryAppends[0].Messages[0] = msgs("changed")[0]

	checkState(t, s, store.State{
		Roles:     []store.Role{role("r1", "writer")},
		Agents:    []store.Agent{agent("a1", "idle")},
		Contacts:  map[string][]store.Contact{"a1": {contact("c1", "one")}},
		Requests:  []store.Request{request("q1", "open")},
		Pending:   []store.Message{message("m1", 1)},
		Histories: []store.History{{AgentID: "a1", Messages: msgs("1", "2")}},
	})
	checkArtifact(t, s, artifact("x1", data), []byte("content"))
}

func testCopyOut(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Roles:          []store.Role{role("r1", "writer")},
		Agents:         []store.Agent{agent("a1", "idle")},
		Contacts:       []store.ContactEntry{entry("a1", "c1", "one"), entry("a2", "c1", "two")},
		Requests:       []store.Request{request("q1", "open")},
		Accepted:       []store.Message{message("m1", 1)},
		HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("1", "2")}},
	})
	data := []byte("content")
	if err := s.PutArtifact(t.Context(), artifact("x1", data), data); err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	got := load(t, s)
	scribble(got.Histories[0].Messages[0])
	got.Histories[0].Messages[1] = msgs("changed")[0]
	got.Histories[0].Messages = append(got.Histories[0].Messages, msgs("added")...)
	scribble(got.Pending[0].Payload)
	got.Roles[0].Name = "changed"
	got.Agents[0].Status = "changed"
	got.Contacts["a1"][0].Note = "changed"
	got.Contacts["a1"] = append(got.Contacts["a1"], contact("c9", "added"))
	delete(got.Contacts, "a2")
	got.Requests[0].Status = "changed"
	got.Pending[0].Seq = 99

	_, gotData, err := s.GetArtifact(t.Context(), "x1")
	if err != nil {
		t.Fatalf("GetArtifact: %v", err)
	}
	scribble(gotData)

	checkState(t, s, store.State{
		Roles:     []store.Role{role("r1", "writer")},
		Agents:    []store.Agent{agent("a1", "idle")},
		Contacts:  map[string][]store.Contact{"a1": {contact("c1", "one")}, "a2": {contact("c1", "two")}},
		Requests:  []store.Request{request("q1", "open")},
		Pending:   []store.Message{message("m1", 1)},
		Histories: []store.History{{AgentID: "a1", Messages: msgs("1", "2")}},
	})
	checkArtifact(t, s, artifact("x1", data), []byte("content"))
}

func testCancelledContext(t *testing.T, s store.Store) {
	data := []byte("content")
	if err := s.PutArtifact(t.Context(), artifact("x1", data), data); err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	if _, err := s.Load(ctx); err == nil {
		t.Error("Load with a cancelled context: got no error")
	}
	if _, _, err := s.GetArtifact(ctx, "x1"); err == nil {
		t.Error("GetArtifact with a cancelled context: got no error")
	}
	if err := s.PutArtifact(ctx, artifact("x2", data), data); err == nil {
		t.Error("PutArtifact with a cancelled context: got no error")
	}

	// A cancelled Apply may or may not take effect, but only as a whole.
	c := store.Change{
		Roles:    []store.Role{role("r1", "writer")},
		Contacts: []store.ContactEntry{entry("a1", "c1", "one")},
		Accepted: []store.Message{message("m1", 1)},
	}
	if err := s.Apply(ctx, c); err == nil {
		t.Error("Apply with a cancelled context: got no error")
	}
	got := load(t, s)
	all := store.State{
		Roles:    []store.Role{role("r1", "writer")},
		Contacts: map[string][]store.Contact{"a1": {contact("c1", "one")}},
		Pending:  []store.Message{message("m1", 1)},
	}
	if !cmp.Equal(store.State{}, got, opts) && !cmp.Equal(all, got, opts) {
		t.Errorf("cancelled Apply took partial effect: Load = %+v", got)
	}
}

func testConcurrent(t *testing.T, s store.Store) {
	const workers, perWorker = 8, 50
	ctx := t.Context()
	id := func(w, i int) string { return fmt.Sprintf("w%d-m%d", w, i) }
	seq := func(w, i int) uint64 { return uint64(w*perWorker + i + 1) }

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("owner-%d", w)
			for i := range perWorker {
				c := store.Change{
					Contacts: []store.ContactEntry{entry(owner, fmt.Sprintf("c%d", i), "")},
					Accepted: []store.Message{message(id(w, i), seq(w, i))},
				}
				// Finish the previous message, so only odd ones stay pending.
				if i%2 == 1 {
					c.Finished = []string{id(w, i-1)}
				}
				if err := s.Apply(ctx, c); err != nil {
					t.Errorf("worker %d: Apply %d: %v", w, i, err)
					return
				}
			}
		})
		// Readers race with the writers.
		wg.Go(func() {
			for range perWorker / 10 {
				if _, err := s.Load(ctx); err != nil {
					t.Errorf("Load: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			data := []byte(fmt.Sprintf("from worker %d", w))
			a := artifact(fmt.Sprintf("x%d", w), data)
			if err := s.PutArtifact(ctx, a, data); err != nil {
				t.Errorf("worker %d: PutArtifact: %v", w, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	want := store.State{Contacts: make(map[string][]store.Contact)}
	for w := range workers {
		owner := fmt.Sprintf("owner-%d", w)
		for i := range perWorker {
			want.Contacts[owner] = append(want.Contacts[owner], contact(fmt.Sprintf("c%d", i), ""))
			if i%2 == 1 {
				want.Pending = append(want.Pending, message(id(w, i), seq(w, i)))
			}
		}
		data := []byte(fmt.Sprintf("from worker %d", w))
		checkArtifact(t, s, artifact(fmt.Sprintf("x%d", w), data), data)
	}
	checkState(t, s, want)
}

func testEmptyJSON(t *testing.T, s store.Store) {
	r := role("r1", "writer")
	r.InterfaceSpec = nil
	a := agent("a1", "idle")
	a.Brief = json.RawMessage{}
	c := contact("c1", "one")
	c.InterfaceSpec = nil
	m1 := message("m1", 1)
	m1.Payload = nil
	m2 := message("m2", 2)
	m2.Payload = json.RawMessage{}

	apply(t, s, store.Change{
		Roles:    []store.Role{r},
		Agents:   []store.Agent{a},
		Contacts: []store.ContactEntry{{Owner: "a1", Contact: c}},
		Accepted: []store.Message{m1, m2},
	})
	checkState(t, s, store.State{
		Roles:    []store.Role{r},
		Agents:   []store.Agent{a},
		Contacts: map[string][]store.Contact{"a1": {c}},
		Pending:  []store.Message{m1, m2},
	})
}

// msgs returns one JSON message per text, as a society's history holds
// them.
func msgs(texts ...string) []json.RawMessage {
	var out []json.RawMessage
	for _, t := range texts {
		out = append(out, json.RawMessage(fmt.Sprintf(`{"role":"user","content":%q}`, t)))
	}
	return out
}

func testHistories(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Histories: []store.History{
		{AgentID: "b", Messages: msgs("hi")},
		{AgentID: "a", Summary: "s"},
	}})
	// A history is replaced whole, by agent id; Load orders by agent id.
	apply(t, s, store.Change{Histories: []store.History{{AgentID: "b", Summary: "later", Messages: msgs("bye", "again")}}})
	checkState(t, s, store.State{Histories: []store.History{
		{AgentID: "a", Summary: "s"},
		{AgentID: "b", Summary: "later", Messages: msgs("bye", "again")},
	}})
}

// testHistoryAppends checks that appends extend a history in order, start
// one for an agent without, and leave the summary alone unless told.
func testHistoryAppends(t *testing.T, s store.Store) {
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "b", Messages: msgs("1", "2")}}})
	apply(t, s, store.Change{Histories: []store.History{{AgentID: "a", Summary: "s", Messages: msgs("x")}}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{
		{AgentID: "a", Summary: "ignored", Messages: msgs("y")},
		{AgentID: "b", Messages: msgs("3")},
	}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "c"}}}) // an empty history
	checkState(t, s, store.State{Histories: []store.History{
		{AgentID: "a", Summary: "s", Messages: msgs("x", "y")},
		{AgentID: "b", Messages: msgs("1", "2", "3")},
		{AgentID: "c"},
	}})
}

// testHistoryDrops checks that Drop removes the oldest messages before the
// append's are added, and is bounded by what there is.
func testHistoryDrops(t *testing.T, s store.Store) {
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{
		{AgentID: "a", Messages: msgs("1", "2", "3", "4")},
		{AgentID: "b", Messages: msgs("1", "2")},
		{AgentID: "c", Messages: msgs("1")},
	}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{
		{AgentID: "a", Drop: 2, Messages: msgs("5")},
		{AgentID: "b", Drop: 5, Messages: msgs("3")},  // more than there are: all go
		{AgentID: "c", Drop: -1, Messages: msgs("2")}, // below zero: none go
	}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Drop: 3}}})
	checkState(t, s, store.State{Histories: []store.History{
		{AgentID: "a", Dropped: 5},
		{AgentID: "b", Messages: msgs("3"), Dropped: 2},
		{AgentID: "c", Messages: msgs("1", "2")},
	}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Messages: msgs("6")}}})
	checkState(t, s, store.State{Histories: []store.History{
		{AgentID: "a", Messages: msgs("6"), Dropped: 5},
		{AgentID: "b", Messages: msgs("3"), Dropped: 2},
		{AgentID: "c", Messages: msgs("1", "2")},
	}})
}

// testHistorySummary checks that SetSummary replaces the summary, with an
// empty one too, and that without it the summary stays.
func testHistorySummary(t *testing.T, s store.Store) {
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Messages: msgs("1", "2", "3")}}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Drop: 1, SetSummary: true, Summary: "one", Messages: msgs("4")}}})
	checkState(t, s, store.State{Histories: []store.History{{AgentID: "a", Summary: "one", Messages: msgs("2", "3", "4"), Dropped: 1}}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Drop: 1, Messages: msgs("5")}}})
	checkState(t, s, store.State{Histories: []store.History{{AgentID: "a", Summary: "one", Messages: msgs("3", "4", "5"), Dropped: 2}}})
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", SetSummary: true}}})
	checkState(t, s, store.State{Histories: []store.History{{AgentID: "a", Messages: msgs("3", "4", "5"), Dropped: 2}}})
}

// testHistoryAppendsInOneChange checks that a change replaces histories
// first, then applies its appends one after the other.
func testHistoryAppendsInOneChange(t *testing.T, s store.Store) {
	apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Messages: msgs("old")}}})
	apply(t, s, store.Change{
		HistoryAppends: []store.HistoryAppend{
			{AgentID: "a", Messages: msgs("1", "2")},
			{AgentID: "a", Drop: 1, SetSummary: true, Summary: "s", Messages: msgs("3")},
			{AgentID: "a", Messages: msgs("4")},
		},
		Histories: []store.History{{AgentID: "a", Summary: "replaced", Messages: msgs("new"), Dropped: 7}},
	})
	checkState(t, s, store.State{Histories: []store.History{{AgentID: "a", Summary: "s", Messages: msgs("1", "2", "3", "4"), Dropped: 8}}})
}

// testLongHistory checks a history grown and trimmed over many changes, as
// a long-lived agent's is: Load returns the messages kept, oldest first.
func testLongHistory(t *testing.T, s store.Store) {
	const turns, keep = 300, 40 // two messages a turn
	var want []json.RawMessage
	for i := range turns {
		a := store.HistoryAppend{AgentID: "a", Messages: msgs(fmt.Sprint("q", i), fmt.Sprint("a", i))}
		if i >= keep {
			a.Drop, a.SetSummary, a.Summary = 2, true, fmt.Sprint("up to ", i-keep)
		}
		apply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{a}})
		want = append(want, a.Messages...)
	}
	checkState(t, s, store.State{Histories: []store.History{{AgentID: "a", Summary: fmt.Sprint("up to ", turns-1-keep), Messages: want[len(want)-2*keep:], Dropped: 2 * (turns - keep)}}})
}

func testStates(t *testing.T, s store.Store) {
	at := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	apply(t, s, store.Change{States: []store.StateEntry{
		{Scope: "task:t", Key: "spec", Value: json.RawMessage(`{"v":1}`), Writer: "agent-1", UpdatedAt: at},
		{Scope: "task:t", Key: "checklist", Value: json.RawMessage(`[1,2]`), Writer: "agent-2", UpdatedAt: at},
		{Scope: "agent:agent-1", Key: "notes", Value: json.RawMessage(`"n"`), Writer: "agent-1", UpdatedAt: at},
	}})
	// Replace by scope and key; an empty value deletes.
	apply(t, s, store.Change{States: []store.StateEntry{
		{Scope: "task:t", Key: "spec", Value: json.RawMessage(`{"v":2}`), Writer: "agent-3", UpdatedAt: at},
		{Scope: "task:t", Key: "checklist"},
	}})
	checkState(t, s, store.State{States: []store.StateEntry{
		{Scope: "agent:agent-1", Key: "notes", Value: json.RawMessage(`"n"`), Writer: "agent-1", UpdatedAt: at},
		{Scope: "task:t", Key: "spec", Value: json.RawMessage(`{"v":2}`), Writer: "agent-3", UpdatedAt: at},
	}})
}

// testFarTimes checks times far from now keep their instant: the zero time
// and years a nanosecond count since 1970 cannot hold.
func testFarTimes(t *testing.T, s store.Store) {
	times := []time.Time{{}, time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), time.Date(1600, 2, 3, 4, 5, 6, 7, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}
	var entries []store.ContactEntry
	var want []store.Contact
	for i, at := range times {
		c := store.Contact{ID: fmt.Sprint("c", i), Role: "r", Source: "preset", AddedAt: at}
		entries = append(entries, store.ContactEntry{Owner: "a", Contact: c})
		want = append(want, c)
	}
	apply(t, s, store.Change{Contacts: entries})
	checkState(t, s, store.State{Contacts: map[string][]store.Contact{"a": want}})
}

// RunEventLog checks the event logs made by newLog against the contract of
// [store.EventLog], one subtest per rule. Each subtest calls newLog for its
// own empty log. A store that keeps events runs it beside [Run]:
//
//	storetest.RunEventLog(t, func(t *testing.T) store.EventLog { return newStore(t) })
func RunEventLog(t *testing.T, newLog func(t *testing.T) store.EventLog) {
	tests := []struct {
		name string
		f    func(t *testing.T, l store.EventLog)
	}{
		{"Empty", testEventsEmpty},
		{"AppendAndRead", testEventsAppendAndRead},
		{"Trim", testEventsTrim},
		{"OutOfOrder", testEventsOutOfOrder},
		{"Gap", testEventsGap},
		{"ConcurrentReads", testEventsConcurrentReads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, newLog(t)) })
	}
}

// events returns the events from..to, each with data {"n":seq}.
func events(from, to uint64) []store.Event {
	var out []store.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, store.Event{Seq: seq, Data: json.RawMessage(`{"n":` + strconv.FormatUint(seq, 10) + `}`)})
	}
	return out
}

// checkEvents fails t unless got are the events from..to, data included.
func checkEvents(t *testing.T, got []store.Event, from, to uint64) {
	t.Helper()
	want := events(from, to)
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d (%d..%d)", len(got), len(want), from, to)
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || !jsonEqual(got[i].Data, want[i].Data) {
			t.Fatalf("event %d: got seq %d data %s, want seq %d data %s", i, got[i].Seq, got[i].Data, want[i].Seq, want[i].Data)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
}

func testEventsEmpty(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	first, last, err := l.EventBounds(ctx)
	if err != nil || first != 0 || last != 0 {
		t.Fatalf("EventBounds of an empty log = %d, %d, %v; want 0, 0, nil", first, last, err)
	}
	got, err := l.ReadEvents(ctx, 1, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("ReadEvents of an empty log = %v, %v; want none", got, err)
	}
}

func testEventsAppendAndRead(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	const n = 3000 // beyond one segment of a store that keeps them in segments
	for from := uint64(1); from <= n; from += 700 {
		if err := l.AppendEvents(ctx, events(from, min(from+699, n))); err != nil {
			t.Fatal(err)
		}
	}
	first, last, err := l.EventBounds(ctx)
	if err != nil || first != 1 || last != n {
		t.Fatalf("EventBounds = %d, %d, %v; want 1, %d", first, last, err, n)
	}
	for _, c := range []struct {
		from  uint64
		limit int
		to    uint64
	}{{1, 10, 10}, {1, n, n}, {1000, 100, 1099}, {1020, 10, 1029}, {2990, 100, n}, {n, 5, n}} {
		got, err := l.ReadEvents(ctx, c.from, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(t, got, c.from, c.to)
	}
	if got, err := l.ReadEvents(ctx, n+1, 10); err != nil || len(got) != 0 {
		t.Fatalf("ReadEvents past the end = %d events, %v; want none", len(got), err)
	}
}

func testEventsTrim(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	const n = 5000
	if err := l.AppendEvents(ctx, events(1, n)); err != nil {
		t.Fatal(err)
	}
	if err := l.TrimEvents(ctx, 3000); err != nil {
		t.Fatal(err)
	}
	first, last, err := l.EventBounds(ctx)
	if err != nil || first < 1 || first > 3000 || last != n {
		t.Fatalf("EventBounds after TrimEvents(3000) = %d, %d, %v; want first in 1..3000, last %d", first, last, err, n)
	}
	got, err := l.ReadEvents(ctx, 1, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].Seq != first {
		t.Fatalf("the first event read is not the first kept, %d", first)
	}
	checkEvents(t, got, first, n)
	// Trimming past the end keeps the newest event, so numbering goes on.
	if err := l.TrimEvents(ctx, n+10); err != nil {
		t.Fatal(err)
	}
	if _, last, err := l.EventBounds(ctx); err != nil || last != n {
		t.Fatalf("EventBounds after trimming everything: last = %d, %v; want %d", last, err, n)
	}
	if err := l.AppendEvents(ctx, events(n+1, n+2)); err != nil {
		t.Fatal(err)
	}
	got, err = l.ReadEvents(ctx, n, 10)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, got, n, n+2)
}

func testEventsOutOfOrder(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	if err := l.AppendEvents(ctx, events(1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendEvents(ctx, events(3, 4)); err == nil {
		t.Fatal("appending events 3 and 4 again succeeded")
	}
	got, err := l.ReadEvents(ctx, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, got, 1, 5)
}

// testEventsGap: events appended after a gap (the society dropped the
// events between) are kept, and a read from within the gap starts after
// it.
func testEventsGap(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	if err := l.AppendEvents(ctx, events(1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendEvents(ctx, events(8, 9)); err != nil {
		t.Fatalf("appending events 8 and 9 after 3: %v", err)
	}
	if first, last, err := l.EventBounds(ctx); err != nil || first != 1 || last != 9 {
		t.Fatalf("EventBounds = %d, %d, %v; want 1, 9", first, last, err)
	}
	got, err := l.ReadEvents(ctx, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := append(events(2, 3), events(8, 9)...)
	if len(got) != len(want) {
		t.Fatalf("read %d events from 2, want %d (2, 3, 8, 9)", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || !jsonEqual(got[i].Data, want[i].Data) {
			t.Fatalf("event %d: got seq %d data %s, want seq %d data %s", i, got[i].Seq, got[i].Data, want[i].Seq, want[i].Data)
		}
	}
	got, err = l.ReadEvents(ctx, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, got, 8, 9)
	if err := l.AppendEvents(ctx, events(9, 10)); err == nil {
		t.Fatal("appending events 9 and 10 after 9 succeeded")
	}
}

func testEventsConcurrentReads(t *testing.T, l store.EventLog) {
	ctx := context.Background()
	const n = 2000
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := l.ReadEvents(ctx, 1, n)
				if err != nil {
					t.Error(err)
					return
				}
				for i, e := range got { // a prefix of what is appended, in order
					if e.Seq != uint64(i+1) {
						t.Errorf("event %d has seq %d", i, e.Seq)
						return
					}
				}
			}
		}()
	}
	for from := uint64(1); from <= n; from += 100 {
		if err := l.AppendEvents(ctx, events(from, from+99)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// testRemove checks that a Removal removes what it names and what goes
// with a removed agent (its registry and its history), and leaves the rest
// in its order; removing what is not there is not an error.
func testRemove(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Roles:    []store.Role{role("r1", "writer"), role("r2", "critic"), role("r3", "editor")},
		Agents:   []store.Agent{agent("a1", "idle"), agent("a2", "idle"), agent("a3", "idle")},
		Contacts: []store.ContactEntry{entry("a1", "root", ""), entry("a2", "root", ""), entry("a2", "a1", ""), entry("root", "a1", ""), entry("root", "a2", ""), entry("root", "user", "")},
		Requests: []store.Request{request("q1", "open"), request("q2", "answered"), request("q3", "open")},
		Histories: []store.History{
			{AgentID: "a1", Messages: msgs("a1's")},
			{AgentID: "a2", Messages: msgs("a2's")},
		},
	})
	apply(t, s, store.Change{Remove: store.Removal{
		Agents:   []string{"a1", "nobody"},
		Roles:    []string{"r2", "r9"},
		Requests: []string{"q2", "q9"},
		Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}, {Owner: "a2", ID: "a1"}, {Owner: "root", ID: "nobody"}, {Owner: "nobody", ID: "a2"}},
	}})
	left := store.State{
		Roles:     []store.Role{role("r1", "writer"), role("r3", "editor")},
		Agents:    []store.Agent{agent("a2", "idle"), agent("a3", "idle")},
		Contacts:  map[string][]store.Contact{"a2": {contact("root", "")}, "root": {contact("a2", ""), contact("user", "")}},
		Requests:  []store.Request{request("q1", "open"), request("q3", "open")},
		Histories: []store.History{{AgentID: "a2", Messages: msgs("a2's")}},
	}
	checkState(t, s, left)
	// Removing them again changes nothing.
	apply(t, s, store.Change{Remove: store.Removal{Agents: []string{"a1"}, Roles: []string{"r2"}, Requests: []string{"q2"}}})
	checkState(t, s, left)
}

// testRemoveThenAddAgain checks that a record added again after its
// removal is a new one: it comes last, and nothing of the removed one
// (a registry, a history) comes back with it.
func testRemoveThenAddAgain(t *testing.T, s store.Store) {
	apply(t, s, store.Change{
		Roles:     []store.Role{role("r1", "writer"), role("r2", "critic")},
		Agents:    []store.Agent{agent("a1", "idle"), agent("a2", "idle")},
		Contacts:  []store.ContactEntry{entry("a1", "root", "old"), entry("root", "a1", "old")},
		Requests:  []store.Request{request("q1", "open"), request("q2", "open")},
		Histories: []store.History{{AgentID: "a1", Messages: msgs("old")}},
	})
	apply(t, s, store.Change{Remove: store.Removal{Agents: []string{"a1"}, Roles: []string{"r1"}, Requests: []string{"q1"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}}}})
	apply(t, s, store.Change{
		Roles:    []store.Role{role("r1", "poet")},
		Agents:   []store.Agent{agent("a1", "busy")},
		Contacts: []store.ContactEntry{entry("root", "a1", "new")},
		Requests: []store.Request{request("q1", "answered")},
	})
	checkState(t, s, store.State{
		Roles:    []store.Role{role("r2", "critic"), role("r1", "poet")},
		Agents:   []store.Agent{agent("a2", "idle"), agent("a1", "busy")},
		Contacts: map[string][]store.Contact{"root": {contact("a1", "new")}},
		Requests: []store.Request{request("q2", "open"), request("q1", "answered")},
	})
}

// testRemoveAfterTheRest checks that a change's Removal applies after the
// rest of it: what the change adds and removes is not there after it.
func testRemoveAfterTheRest(t *testing.T, s store.Store) {
	apply(t, s, store.Change{Agents: []store.Agent{agent("a1", "idle")}})
	apply(t, s, store.Change{
		Roles:          []store.Role{role("r1", "writer")},
		Agents:         []store.Agent{agent("a1", "busy"), agent("a2", "idle")},
		Contacts:       []store.ContactEntry{entry("a1", "root", ""), entry("root", "a2", ""), entry("root", "user", "")},
		Requests:       []store.Request{request("q1", "open")},
		HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("turn")}},
		Remove: store.Removal{
			Agents: []string{"a1"}, Roles: []string{"r1"}, Requests: []string{"q1"},
			Contacts: []store.ContactKey{{Owner: "root", ID: "a2"}},
		},
	})
	checkState(t, s, store.State{
		Agents:   []store.Agent{agent("a2", "idle")},
		Contacts: map[string][]store.Contact{"root": {contact("user", "")}},
	})
}

// testRemoveMany removes most of many records, a few at a time and then
// in bulk, as a society forgets the agents of its tasks: what is left is
// listed in its order, and found and replaced by id.
func testRemoveMany(t *testing.T, s store.Store) {
	const n = 300
	var add store.Change
	for i := range n {
		id := fmt.Sprintf("a%03d", i)
		add.Agents = append(add.Agents, agent(id, "idle"))
		add.Contacts = append(add.Contacts, entry(id, "root", ""), entry("root", id, ""))
	}
	apply(t, s, add)
	var want []store.Agent
	var wantRoot []store.Contact
	var bulk store.Removal
	for i := range n {
		id := fmt.Sprintf("a%03d", i)
		switch {
		case i%10 == 0:
			want = append(want, agent(id, "idle"))
			wantRoot = append(wantRoot, contact(id, ""))
		case i < n/2:
			apply(t, s, store.Change{Remove: store.Removal{Agents: []string{id}, Contacts: []store.ContactKey{{Owner: "root", ID: id}}}})
		default:
			bulk.Agents = append(bulk.Agents, id)
			bulk.Contacts = append(bulk.Contacts, store.ContactKey{Owner: "root", ID: id})
		}
	}
	apply(t, s, store.Change{Remove: bulk})
	// The agents left are found by id: a replacement keeps their place.
	apply(t, s, store.Change{Agents: []store.Agent{agent("a150", "busy")}, Contacts: []store.ContactEntry{entry("root", "a150", "again")}})
	wantContacts := map[string][]store.Contact{"root": wantRoot}
	for i, a := range want {
		if a.ID == "a150" {
			want[i] = agent("a150", "busy")
		}
		wantContacts[a.ID] = []store.Contact{contact("root", "")}
	}
	for i, c := range wantRoot {
		if c.ID == "a150" {
			wantRoot[i].Note = "again"
		}
	}
	checkState(t, s, store.State{Agents: want, Contacts: wantContacts})
}
