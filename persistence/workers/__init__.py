"""Workers that run above the plane's facade: the drain worker and the inbox compactor."""
