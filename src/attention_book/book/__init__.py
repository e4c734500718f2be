"""The book's own machinery: explorers, diagrams, claims, shown source and live views.

Nothing in the building blocks (models, data) imports from here."""
