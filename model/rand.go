//go:build !wasip1

package model

import "crypto/rand"

// randomBytes fills b from crypto/rand.
func randomBytes(b []byte) error {
	_, err := rand.Read(b)
	return err
}
