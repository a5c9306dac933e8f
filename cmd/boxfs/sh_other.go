//go:build !linux

package main

import (
	"errors"
	"net"
	"os"
)

var errShLinux = errors.New("boxfs sh is implemented on Linux only")

func peerUID(c *net.UnixConn) (int, error) { return -1, errShLinux }

func boxfsMounts() ([]string, error) { return nil, errShLinux }

func getwd() (string, error) { return os.Getwd() }
