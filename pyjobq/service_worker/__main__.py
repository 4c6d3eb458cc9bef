"""``python -m pyjobq.service_worker``: write the Service Worker's script (:func:`main`)."""

from . import main

raise SystemExit(main())
