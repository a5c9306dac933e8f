package agent

import "errors"

// Main runs the agent with its command-line arguments (after "boxfs agent").
// Not yet written: the hands issue builds it.
func Main(args []string) error {
	return errors.New("agent: not built yet")
}
