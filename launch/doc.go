// Package launch keeps a program alive in a box: a supervisor in the box
// restarts it by policy, stops it with grace, bounds its output and keeps
// its state in a file the host reads.
package launch
