// Package agent is boxfs's side of the agent channel: the SFTP server that
// runs inside a box (the same static binary, "boxfs agent") and the client
// that speaks to it over one long-lived exec.
package agent
