"""Engines that turn a page image into text, behind one small protocol (`base.Engine`)."""
