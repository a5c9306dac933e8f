package agent

// BinaryPath returns where the channel's agent binary is in the box, once
// an agent started from it (else "").
func (ch *Channel) BinaryPath() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.uploaded {
		return ""
	}
	return ch.dest
}
