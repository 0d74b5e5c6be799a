"""The RunPod entry: the handler functions and the event loop the worker lives on."""
