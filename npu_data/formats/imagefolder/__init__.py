"""torchvision's ImageFolder layout (``root/<class>/**/<image>``) as an import source."""
