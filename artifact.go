package agentsociety

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"agentsociety/internal/ids"
	"agentsociety/store"
)

// ArtifactRefPrefix starts every artifact reference.
const ArtifactRefPrefix = "artifact:"

// Artifact is the metadata of a stored artifact: a piece of work handed from
// agent to agent by reference instead of pasted into messages. Artifacts are
// immutable: a reference always reads back the same bytes.
type Artifact struct {
	ID        string
	Name      string
	MediaType string
	CreatedBy string
	Size      int64
	CreatedAt time.Time
}

// Ref returns the artifact's reference, "artifact:<id>".
func (a Artifact) Ref() string { return ArtifactRefPrefix + a.ID }

// ArtifactSpec describes an artifact to store.
type ArtifactSpec struct {
	Name      string // a name for people and models; need not be unique
	MediaType string // "" means application/octet-stream
	Data      []byte
}

// PutArtifact stores an artifact created by the agent and returns its
// metadata; pass Ref() around. Data larger than Config.MaxArtifactBytes is
// refused with ErrArtifactTooLarge.
func (x *Actor) PutArtifact(ctx context.Context, spec ArtifactSpec) (Artifact, error) {
	s, by := x.s, x.a.info.ID
	if int64(len(spec.Data)) > s.cfg.MaxArtifactBytes {
		return Artifact{}, s.refuse("put_artifact", by, newError(ErrArtifactTooLarge,
			"the artifact has "+itoa(len(spec.Data))+" bytes; the limit is "+itoa(int(s.cfg.MaxArtifactBytes))))
	}
	if s.isClosed() {
		return Artifact{}, errClosed()
	}
	if x.Agent().Status == StatusTerminated {
		return Artifact{}, s.refuse("put_artifact", by, terminatedError(x.a, x.a))
	}
	if spec.MediaType == "" {
		spec.MediaType = "application/octet-stream"
	}
	a := Artifact{
		ID:        ids.Random("a"),
		Name:      spec.Name,
		MediaType: spec.MediaType,
		CreatedBy: by,
		Size:      int64(len(spec.Data)),
		CreatedAt: time.Now(),
	}
	if err := s.store.PutArtifact(ctx, store.Artifact(a), bytes.Clone(spec.Data)); err != nil {
		return Artifact{}, s.refuse("put_artifact", by, storeError(err))
	}
	s.mu.Lock()
	s.progressed(by)
	s.mu.Unlock()
	s.emit(Event{Kind: EventArtifactStored, Task: x.taskID, Agent: by, Turn: x.turn.id(), Artifact: a.ID, Name: a.Name})
	s.log.LogAttrs(ctx, slog.LevelInfo, "artifact stored",
		slog.String("artifact", a.ID), slog.String("name", a.Name), slog.String("by", by), slog.Int64("size", a.Size))
	return a, nil
}

// GetArtifact reads an artifact; see [Society.GetArtifact].
func (x *Actor) GetArtifact(ctx context.Context, ref string) (Artifact, []byte, error) {
	return x.s.GetArtifact(ctx, ref)
}

// GetArtifact reads the artifact that ref names: "artifact:<id>" or the bare
// id. A string that is not a reference is refused with ErrInvalidArtifactRef
// (whatever a store does with ids, it never sees a path), and an unknown one
// with ErrArtifactNotFound.
func (s *Society) GetArtifact(ctx context.Context, ref string) (Artifact, []byte, error) {
	id, err := ParseArtifactRef(ref)
	if err != nil {
		return Artifact{}, nil, err
	}
	a, data, err := s.store.GetArtifact(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Artifact{}, nil, &Error{Code: ErrArtifactNotFound, Message: "no artifact " + strconvQuote(ref)}
	}
	if err != nil {
		return Artifact{}, nil, storeError(err)
	}
	return Artifact(a), data, nil
}

// ParseArtifactRef returns the id in an artifact reference, which is
// "artifact:<id>" or the bare id. An id is 1 to 64 ASCII letters, digits and
// hyphens.
func ParseArtifactRef(ref string) (string, error) {
	id := strings.TrimPrefix(strings.TrimSpace(ref), ArtifactRefPrefix)
	if id == "" || len(id) > 64 {
		return "", &Error{Code: ErrInvalidArtifactRef, Message: strconvQuote(ref) + " is not an artifact reference"}
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "", &Error{Code: ErrInvalidArtifactRef, Message: strconvQuote(ref) + " is not an artifact reference"}
		}
	}
	return id, nil
}
