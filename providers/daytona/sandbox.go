package daytona

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// sandboxDTO is the Sandbox (and SandboxListItem) of the control plane: the
// fields boxfs reads.
type sandboxDTO struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	Snapshot         string            `json:"snapshot"`
	Labels           map[string]string `json:"labels"`
	Target           string            `json:"target"`
	CPU              float64           `json:"cpu"`
	GPU              float64           `json:"gpu"`
	Memory           float64           `json:"memory"` // GiB
	Disk             float64           `json:"disk"`   // GiB
	State            string            `json:"state"`
	DesiredState     string            `json:"desiredState"`
	ErrorReason      string            `json:"errorReason"`
	CreatedAt        apiTime           `json:"createdAt"`
	UpdatedAt        apiTime           `json:"updatedAt"`
	NetworkBlockAll  bool              `json:"networkBlockAll"`
	NetworkAllowList string            `json:"networkAllowList"`
	DomainAllowList  string            `json:"domainAllowList"`
	ToolboxProxyURL  string            `json:"toolboxProxyUrl"`
	SandboxClass     string            `json:"sandboxClass"`
}

// createRequest is the CreateSandbox body boxfs sends.
type createRequest struct {
	Name               string            `json:"name"`
	Snapshot           string            `json:"snapshot,omitempty"`
	Target             string            `json:"target,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	Labels             map[string]string `json:"labels"`
	AutoStopInterval   int               `json:"autoStopInterval"`
	AutoDeleteInterval int               `json:"autoDeleteInterval"`
	TTLMinutes         int               `json:"ttlMinutes"`
	NetworkBlockAll    *bool             `json:"networkBlockAll,omitempty"`
	DomainAllowList    *string           `json:"domainAllowList,omitempty"`
}

// Daytona's sandbox states.
const (
	stateCreating  = "creating"
	stateStarted   = "started"
	stateStarting  = "starting"
	stateStopped   = "stopped"
	stateStopping  = "stopping"
	stateDestroyed = "destroyed"
	stateDestroy   = "destroying"
	stateError     = "error"
	stateBuildFail = "build_failed"
	stateArchived  = "archived"
	statePaused    = "paused"
)

// failed reports a state a sandbox does not come back from by itself.
func failed(state string) bool { return state == stateError || state == stateBuildFail }

// deleted reports a sandbox that is being or has been deleted: its state
// says so, or a delete was accepted (desiredState destroyed), which
// Daytona carries out a while later, the state unchanged until then.
func (s sandboxDTO) deleted() bool {
	return s.State == stateDestroyed || s.State == stateDestroy || s.DesiredState == stateDestroyed
}

// settled reports a sandbox whose state is not changing: it is where it
// is meant to be, or failed.
func (s sandboxDTO) settled() bool {
	return s.DesiredState == "" || s.State == s.DesiredState || failed(s.State)
}

// boxState maps a sandbox's state to a box's. Unknown states (newer APIs,
// the generated enums' "11184809" sentinel) read as stopped, with the
// state named in the reason.
func boxState(s sandboxDTO) providers.Status {
	st := providers.Status{StartedAt: time.Time(s.CreatedAt)}
	if s.DesiredState == stateDestroyed {
		st.State, st.Reason, st.EndedAt = providers.StateEnded, "daytona: deleted", time.Time(s.UpdatedAt)
		return st
	}
	switch s.State {
	case stateStarted:
		st.State = providers.StateRunning
	case stateCreating, stateStarting, "restoring", "pending_build", "building_snapshot", "pulling_snapshot", "resuming":
		st.State = providers.StateStarting
	case stateStopped, stateStopping, stateArchived, "archiving", "paused", "pausing", "resizing", "snapshotting", "forking":
		st.State, st.Reason = providers.StateStopped, "daytona state "+s.State
	case stateDestroyed, stateDestroy, stateError, stateBuildFail:
		st.State, st.Reason = providers.StateEnded, "daytona state "+s.State
		if s.ErrorReason != "" {
			st.Reason += ": " + s.ErrorReason
		}
		st.EndedAt = time.Time(s.UpdatedAt)
	default:
		st.State, st.Reason = providers.StateStopped, fmt.Sprintf("daytona state %q", s.State)
	}
	return st
}

// listPage is one page of a listing: {items, nextCursor} as the current
// API answers. Older APIs answered a bare array or {items, total, page,
// totalPages}; those are read when they hold the whole listing.
type listPage struct {
	items      []sandboxDTO
	nextCursor string // "" at the end
	morePages  bool   // an older API's page with more after it
}

func parseListPage(b []byte) (listPage, error) {
	b = bytes.TrimSpace(b)
	var p listPage
	if len(b) > 0 && b[0] == '[' {
		err := json.Unmarshal(b, &p.items)
		return p, err
	}
	var obj struct {
		Items      []sandboxDTO `json:"items"`
		NextCursor *string      `json:"nextCursor"`
		Page       int          `json:"page"`
		TotalPages int          `json:"totalPages"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return p, err
	}
	p.items = obj.Items
	if obj.NextCursor != nil {
		p.nextCursor = *obj.NextCursor
	}
	p.morePages = obj.NextCursor == nil && obj.Page > 0 && obj.Page < obj.TotalPages
	return p, nil
}

// apiTime reads a timestamp leniently: RFC 3339, or null or "" as zero.
type apiTime time.Time

func (t *apiTime) UnmarshalJSON(b []byte) error {
	var s string
	if string(b) == "null" || json.Unmarshal(b, &s) != nil || s == "" {
		*t = apiTime{}
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		*t = apiTime{}
		return nil
	}
	*t = apiTime(v)
	return nil
}
