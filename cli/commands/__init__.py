"""One module per `gpart` command: parse options, call one library function, render."""
