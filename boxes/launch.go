package boxes

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/boxfs/boxfs/hands"
	"github.com/boxfs/boxfs/launch"
	"github.com/boxfs/boxfs/providers"
)

// launches is what the manager keeps of a box's launches on the host: the
// names made (mkdir) and not started yet, and the secrets and stdin
// written for each and not yet taken by a start. Those are held in memory
// only, never written anywhere.
type launches struct {
	mu      sync.Mutex
	made    map[string]bool
	pending map[string]launch.Input
	h       *hands.Hands     // the hands l was made with
	l       *launch.Launcher // which remembers what the box has installed
}

// launchSlack bounds a launch operation beyond the op timeout: a start
// waits for its first incarnation, a stop for the grace and the
// before-stop program.
func launchSlack(op string) time.Duration {
	if op == "stop" || op == "restart" {
		return 2*launch.MaxGrace + time.Minute
	}
	return time.Minute
}

// launcher returns the launcher of the box: its hands' commands (through
// the agent's command stream where the box has one), its agent binary as
// the supervisor where it runs, else the sh one.
func (b *Box) launcher(ctx context.Context) (*launch.Launcher, error) {
	h, err := b.Hands(ctx)
	if err != nil {
		return nil, err
	}
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	if b.launches.h == h {
		return b.launches.l, nil
	}
	l, err := launch.New(h.Box(), launch.Options{Facts: h.Facts(), Exec: h.Exec, Agent: h.AgentPath(), Logger: b.m.log})
	if err != nil {
		return nil, err
	}
	b.launches.h, b.launches.l = h, l
	return l, nil
}

// doLaunch runs fn with the box's launcher within the bound of op; a
// start, stop or restart is not abandoned when the caller is interrupted.
func (b *Box) doLaunch(ctx context.Context, op string, fn func(ctx context.Context, l *launch.Launcher) error) error {
	mutation := op == "start" || op == "stop" || op == "restart" || op == "remove"
	return b.Do(ctx, mutation, launchSlack(op), func(ctx context.Context) error {
		l, err := b.launcher(ctx)
		if err != nil {
			return err
		}
		return fn(ctx, l)
	})
}

// pendingInput returns the secrets and stdin written for the launch name
// and not yet taken.
func (b *Box) pendingInput(name string) launch.Input {
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	return b.launches.pending[name]
}

// took forgets what was pending for name once a start went through: the
// secrets and stdin written are for the next start only.
func (b *Box) took(name string) {
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	delete(b.launches.pending, name)
	delete(b.launches.made, name)
}

// SetLaunchSecrets keeps secrets for the next start of the launch name,
// in memory only.
func (b *Box) SetLaunchSecrets(name string, secrets map[string]string) error {
	return b.setPending(name, func(in *launch.Input) { in.Secrets = secrets })
}

// SetLaunchStdin keeps stdin for the next start of the launch name, in
// memory only.
func (b *Box) SetLaunchStdin(name string, stdin []byte) error {
	return b.setPending(name, func(in *launch.Input) { in.Stdin = stdin })
}

func (b *Box) setPending(name string, set func(*launch.Input)) error {
	if err := launch.CheckName(name); err != nil {
		return providers.E(providers.Invalid, "boxes.Launch", err)
	}
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	if b.launches.pending == nil {
		b.launches.pending = map[string]launch.Input{}
	}
	in := b.launches.pending[name]
	set(&in)
	b.launches.pending[name] = in
	return nil
}

// MakeLaunch names a launch that is not started yet (mkdir launch/NAME):
// it is listed until it starts or the box is forgotten.
func (b *Box) MakeLaunch(name string) error {
	if err := launch.CheckName(name); err != nil {
		return providers.E(providers.Invalid, "boxes.MakeLaunch", err)
	}
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	if b.launches.made == nil {
		b.launches.made = map[string]bool{}
	}
	b.launches.made[name] = true
	return nil
}

// Made reports whether name was made (MakeLaunch) and not started since.
func (b *Box) Made(name string) bool {
	b.launches.mu.Lock()
	defer b.launches.mu.Unlock()
	return b.launches.made[name]
}

// launchOp runs op on the box's launcher (see doLaunch) and returns its
// answer.
func launchOp[T any](ctx context.Context, b *Box, op string, fn func(ctx context.Context, l *launch.Launcher) (T, error)) (T, error) {
	var out T
	err := b.doLaunch(ctx, op, func(ctx context.Context, l *launch.Launcher) error {
		var err error
		out, err = fn(ctx, l)
		return err
	})
	return out, err
}

// StartLaunch starts the launch name (see launch.Launcher.Start), with the
// secrets and stdin written for it when spec has none; a start takes them.
func (b *Box) StartLaunch(ctx context.Context, name string, spec launch.Spec) (launch.State, error) {
	if len(spec.Secrets) == 0 && len(spec.Stdin) == 0 {
		spec.Input = b.pendingInput(name)
	}
	st, err := launchOp(ctx, b, "start", func(ctx context.Context, l *launch.Launcher) (launch.State, error) {
		return l.Start(ctx, name, spec)
	})
	if err == nil {
		b.took(name)
		b.m.log.Info("launch started", "box", b.name, "launch", name, "phase", st.Phase, "pid", st.PID, "via", st.Via)
	}
	return st, err
}

// RestartLaunch restarts the launch name (see launch.Launcher.Restart),
// with the secrets and stdin written for it, if any.
func (b *Box) RestartLaunch(ctx context.Context, name string) (launch.State, error) {
	in := b.pendingInput(name)
	st, err := launchOp(ctx, b, "restart", func(ctx context.Context, l *launch.Launcher) (launch.State, error) {
		return l.Restart(ctx, name, in)
	})
	if err == nil {
		b.took(name)
		b.m.log.Info("launch restarted", "box", b.name, "launch", name, "incarnation", st.Incarnation)
	}
	return st, err
}

// StopLaunch stops the launch name (see launch.Launcher.Stop).
func (b *Box) StopLaunch(ctx context.Context, name string, grace *time.Duration) (launch.State, error) {
	st, err := launchOp(ctx, b, "stop", func(ctx context.Context, l *launch.Launcher) (launch.State, error) {
		return l.Stop(ctx, name, grace)
	})
	if err == nil {
		b.m.log.Info("launch stopped", "box", b.name, "launch", name)
	}
	return st, err
}

// LaunchState returns the state of the launch name as the box has it.
func (b *Box) LaunchState(ctx context.Context, name string) (launch.State, error) {
	return launchOp(ctx, b, "state", func(ctx context.Context, l *launch.Launcher) (launch.State, error) {
		return l.State(ctx, name)
	})
}

// Launches returns the names of the box's launches, sorted: those in the
// box and those made and not started. A declared box not made yet has
// only the latter (listing does not make it).
func (b *Box) Launches(ctx context.Context) ([]string, error) {
	b.launches.mu.Lock()
	var names []string
	for n := range b.launches.made {
		names = append(names, n)
	}
	b.launches.mu.Unlock()
	if b.Info().State != StateDeclared {
		states, err := launchOp(ctx, b, "list", func(ctx context.Context, l *launch.Launcher) ([]launch.State, error) {
			return l.List(ctx)
		})
		if err != nil && !providers.IsCode(err, providers.Unsupported) {
			return nil, err
		}
		for _, st := range states {
			names = append(names, st.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// ReadLaunchLog reads the launch's output from off (see
// launch.Launcher.ReadLog).
func (b *Box) ReadLaunchLog(ctx context.Context, name string, off int64, n int) (launch.Log, error) {
	return launchOp(ctx, b, "log", func(ctx context.Context, l *launch.Launcher) (launch.Log, error) {
		return l.ReadLog(ctx, name, off, n)
	})
}

// RemoveLaunch forgets an ended launch, in the box and here.
func (b *Box) RemoveLaunch(ctx context.Context, name string) error {
	if b.Made(name) {
		b.launches.mu.Lock()
		delete(b.launches.made, name)
		delete(b.launches.pending, name)
		b.launches.mu.Unlock()
		return nil
	}
	err := b.doLaunch(ctx, "remove", func(ctx context.Context, l *launch.Launcher) error {
		return l.Remove(ctx, name)
	})
	if err == nil {
		b.launches.mu.Lock()
		delete(b.launches.pending, name)
		b.launches.mu.Unlock()
	}
	return err
}
