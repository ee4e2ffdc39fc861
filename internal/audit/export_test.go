package audit

// SetBetweenReads sets the hook run between a page's core and score reads
// (nil: none).
func SetBetweenReads(f func()) { betweenReads = f }
