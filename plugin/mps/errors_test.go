package mps

import "errors"

func errorsIsNotFound(err error) bool { return errors.Is(err, ErrControlBinaryNotFound) }
